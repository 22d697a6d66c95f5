"""kiln gateway's request framing against an independent HTTP/1.1 parser
(h11): each request head of a table of request smuggling and edge cases,
and every file of the gateway's fuzz corpus, goes to a running gateway
over a socket and to h11; both must agree on taking or refusing it, and
on the body's length when both take it. Where the gateway is stricter on
purpose, the case is listed in STRICTER with the reason."""
import re
import socket
from pathlib import Path

import h11
import pytest

from test_gateway import (deployment, gateways, home, key, routes,  # noqa
                          upstreams)

# The gateway's fuzz corpora: its parsers' inputs and request heads.
CORPORA = [Path(__file__).resolve().parents[1] / "fuzz" / "corpus" / name
           for name in ("gateway", "gateway_head")]
AUTH = b"Authorization: Bearer sk-one\r\n"
POST = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + AUTH
GET = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + AUTH
# The error codes of the gateway's refusals of a head (it then closes);
# other answers (401, 404, 400 invalid_json, ...) mean it took the head.
FRAMING_REFUSALS = (b"invalid_request", b"length_required",
                    b"headers_too_large", b"http_version_not_supported")

# (name, head) pairs; a head taken by both gets a body of its length.
CASES = [
    ("plain", GET + b"\r\n"),
    ("length", POST + b"Content-Length: 5\r\n\r\n"),
    ("length zero", POST + b"Content-Length: 0\r\n\r\n"),
    ("length with spaces", POST + b"Content-Length:  5 \t\r\n\r\n"),
    ("obs-text value", GET + b"X-A: caf\xc3\xa9\r\n\r\n"),
    ("http/1.0", b"GET /v1/models HTTP/1.0\r\n" + AUTH + b"\r\n"),
    ("absolute target",
     b"GET http://x/v1/models HTTP/1.1\r\nHost: x\r\n" + AUTH + b"\r\n"),
    ("conflicting lengths",
     POST + b"Content-Length: 5\r\nContent-Length: 6\r\n\r\n"),
    ("conflicting list", POST + b"Content-Length: 5, 6\r\n\r\n"),
    ("repeated length",
     POST + b"Content-Length: 5\r\nContent-Length: 5\r\n\r\n"),
    ("repeated list", POST + b"Content-Length: 5, 5\r\n\r\n"),
    ("signed length", POST + b"Content-Length: +5\r\n\r\n"),
    ("negative length", POST + b"Content-Length: -5\r\n\r\n"),
    ("hex length", POST + b"Content-Length: 0x5\r\n\r\n"),
    ("empty length", POST + b"Content-Length:\r\n\r\n"),
    ("overflowing length",
     POST + b"Content-Length: 18446744073709551621\r\n\r\n"),
    ("length and chunked",
     POST + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"),
    ("chunked and length",
     POST + b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"),
    ("chunked", POST + b"Transfer-Encoding: chunked\r\n\r\n"),
    ("identity coding", POST + b"Transfer-Encoding: identity\r\n\r\n"),
    ("space before colon", POST + b"Content-Length : 5\r\n\r\n"),
    ("tab before colon", POST + b"Content-Length\t: 5\r\n\r\n"),
    ("space in name", GET + b"X A: b\r\n\r\n"),
    ("bad name char", GET + b"X(A): b\r\n\r\n"),
    ("empty name", GET + b": b\r\n\r\n"),
    ("no colon", GET + b"Nothing\r\n\r\n"),
    ("folded value", GET + b"X-A: b\r\n c\r\n\r\n"),
    ("folded length", POST + b"X-A: b\r\n\tContent-Length: 5\r\n\r\n"),
    ("nul in value", GET + b"X-A: b\x00c\r\n\r\n"),
    ("nul in name", GET + b"X-\x00A: b\r\n\r\n"),
    ("control in value", GET + b"X-A: b\x01c\r\n\r\n"),
    ("del in value", GET + b"X-A: b\x7fc\r\n\r\n"),
    ("bare cr in value", POST + b"X-A: b\rContent-Length: 5\r\n\r\n"),
    ("bare lf in value", POST + b"X-A: b\nContent-Length: 5\r\n\r\n"),
    ("bare lf lines",
     b"GET /v1/models HTTP/1.1\nHost: x\nAuthorization: Bearer sk-one\n\n"),
    ("http/1.9", b"GET /v1/models HTTP/1.9\r\nHost: x\r\n" + AUTH + b"\r\n"),
    ("http/2.0", b"GET /v1/models HTTP/2.0\r\nHost: x\r\n" + AUTH + b"\r\n"),
    ("lowercase version",
     b"GET /v1/models http/1.1\r\nHost: x\r\n" + AUTH + b"\r\n"),
    ("no version", b"GET /v1/models\r\nHost: x\r\n" + AUTH + b"\r\n"),
    ("two spaces", b"GET  /v1/models HTTP/1.1\r\nHost: x\r\n" + AUTH +
     b"\r\n"),
    ("tab separator", b"GET\t/v1/models HTTP/1.1\r\nHost: x\r\n" + AUTH +
     b"\r\n"),
    ("trailing space", b"GET /v1/models HTTP/1.1 \r\nHost: x\r\n" + AUTH +
     b"\r\n"),
    ("relative target", b"GET v1/models HTTP/1.1\r\nHost: x\r\n" + AUTH +
     b"\r\n"),
    ("non-ascii target", b"GET /v1/mod\xc3\xa9ls HTTP/1.1\r\nHost: x\r\n" +
     AUTH + b"\r\n"),
    ("bad method", b"G(T /v1/models HTTP/1.1\r\nHost: x\r\n" + AUTH +
     b"\r\n"),
    ("no host", b"GET /v1/models HTTP/1.1\r\n" + AUTH + b"\r\n"),
    ("two hosts", GET + b"Host: y\r\n\r\n"),
    ("leading blank line", b"\r\n" + GET + b"\r\n"),
]

# Cases h11 takes that the gateway refuses on purpose.
STRICTER = {
    # RFC 9112 6.3 lets a recipient refuse a repeated Content-Length even
    # when the values agree; nginx does. Refusing leaves nothing to guess.
    "repeated length": "repeated Content-Length is refused outright",
    "repeated list": "a Content-Length list is refused outright",
    # The gateway takes bodies with a length only (OpenAI clients send
    # one); h11 decodes chunked bodies.
    "chunked": "chunked request bodies get 411",
    # Other versions get 505; h11 takes any HTTP/d.d.
    "http/1.9": "only HTTP/1.0 and HTTP/1.1 are spoken",
    "http/2.0": "only HTTP/1.0 and HTTP/1.1 are spoken",
    # h11 takes any visible characters as a target; the gateway wants
    # origin-form, absolute-form or "*".
    # h11 reads lengths as Python integers, which never overflow; the
    # gateway takes at most 18 digits, which fit 64 bits.
    "overflowing length": "a Content-Length past 18 digits is refused",
    "relative target": "the target must start with / (or be absolute)",
    # RFC 9112 2.2 lets a server accept bare LF line endings; a proxy in
    # front may read them otherwise, so the gateway does not.
    "bare lf lines": "lines must end in CRLF",
    "bare lf in value": "lines must end in CRLF",
    # RFC 9112 6.1: a request with both "ought to be handled as an error";
    # h11 lets Transfer-Encoding win.
    "length and chunked": "Content-Length with Transfer-Encoding is refused",
    "chunked and length": "Content-Length with Transfer-Encoding is refused",
    # RFC 9112 5.2 lets a server refuse obsolete line folding (400);
    # h11 unfolds it.
    "folded value": "obsolete line folding is refused",
    "folded length": "obsolete line folding is refused",
    # Control bytes are not field-value characters (RFC 9110 5.5); h11
    # lets all but NUL, CR and LF through.
    "control in value": "control bytes in a value are refused",
    "del in value": "control bytes in a value are refused",
}


def h11_reads(data):
    """h11's reading of data as a request sent whole: None when refused,
    else the body's length (-1 for chunked)."""
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(data)
    try:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(b"")
            event = conn.next_event()
    except h11.RemoteProtocolError:
        return None
    if not isinstance(event, h11.Request):
        return None
    headers = dict(event.headers)
    if b"transfer-encoding" in headers:
        return -1
    return int(headers.get(b"content-length", b"0"))


def exchange(url, data, timeout=5):
    """Send data, close the sending side, and read every answer until the
    gateway closes: each answer's status, or its error code if any."""
    host, port = url[len("http://"):].rsplit(":", 1)
    got = b""
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        while True:
            try:
                piece = s.recv(65536)
            except ConnectionResetError:
                break
            if not piece:
                break
            got += piece
    answers = re.split(rb"(?=HTTP/1\.1 \d{3} )", got)[1:]
    return [m.group(1) if (m := re.search(rb'"code":"(\w+)"', a))
            else a[9:12] for a in answers]


def gateway_takes(g, head, body_len):
    """Whether the gateway took the head; with body_len, it is followed by
    that many body bytes and a second request, which must be answered as
    one (404), which shows the gateway read the same length."""
    if body_len is None or body_len < 0 or body_len > 65536:
        codes = exchange(g.url, head)
        return bool(codes) and codes[0] not in FRAMING_REFUSALS
    nxt = b"GET /v2/next HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    codes = exchange(g.url, head + b"x" * body_len + nxt)
    if not codes or codes[0] in FRAMING_REFUSALS:
        return False
    if b"HTTP/1.0" not in head.split(b"\r\n")[0]:
        assert codes[1:] == [b"not_found"], (head, codes)
    return True


@pytest.fixture
def gateway(home, gateways, upstreams):
    chat = upstreams("chat")
    return gateways(home, routes([deployment("chat", [chat])],
                                 [key("app1", "sk-one", ["chat"])]),
                    args=["--head-timeout", "1s"])


def test_framing_agrees_with_h11(gateway):
    names = [name for name, _ in CASES]
    assert len(set(names)) == len(names)
    assert set(STRICTER) <= set(names)
    disagreements = []
    for name, head in CASES:
        theirs = h11_reads(head)
        ours = gateway_takes(gateway, head, theirs)
        if name in STRICTER:
            assert theirs is not None and not ours, (name, theirs, ours)
        elif ours != (theirs is not None):
            disagreements.append((name, ours, theirs))
    assert not disagreements, "\n".join(map(str, disagreements))


def test_fuzz_corpus_agrees_with_h11(gateway):
    files = sorted(p for d in CORPORA for p in d.iterdir() if p.is_file())
    assert files
    for path in files:
        data = path.read_bytes()
        theirs = h11_reads(data)
        ours = gateway_takes(gateway, data, None)
        assert ours == (theirs is not None), (path.name, ours, theirs)
