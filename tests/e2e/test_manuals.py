"""The manuals against the binary: every flag that a command's --help
names is in its man page (`kiln man COMMAND`) and in its section of
docs/cli.md; every route of the server's route tables is in docs/api.md.
A failure lists everything missing, one `COMMAND: --flag` or `METHOD PATH`
a line, so a new flag or route names the line of docs it needs."""
import re
import subprocess
from pathlib import Path

from conftest import KILN

SOURCE = Path(__file__).resolve().parents[2]
FLAG = re.compile(r"(?:(?<=^)|(?<=[\s\[|(`,]))(--[a-z][a-z0-9_-]*[a-z0-9]|-[a-zA-Z](?![\w-]))")
ROUTE = re.compile(r'\{\s*"(GET|POST|PUT|PATCH|DELETE)",\s*"(/[^"]*)"')


def kiln(*args):
    res = subprocess.run([KILN, *args], capture_output=True, text=True,
                         timeout=30)
    assert res.returncode == 0, res.stderr
    return res.stdout


def commands():
    """The commands `kiln --help` lists (the hidden ones are internal)."""
    out = kiln("--help")
    block = out.split("Commands:\n", 1)[1].split("\n\n", 1)[0]
    return [line.split()[0] for line in block.splitlines() if line.strip()]


# docs/cli.md documents these once, under "Global flags".
GLOBAL = {"--server", "--token", "-o", "--output", "--help", "-h"}
# An option list's line: the flag first, indented as the help tables do,
# then its argument or its words (not prose that wraps onto "--x,").
OPTION_LINE = re.compile(r"^ {1,10}((?:-[a-zA-Z],\s+)?--?[a-zA-Z][\w-]*)(?=\s|$)",
                         re.M)


def help_flags(text):
    """A command's own flags: those on its usage lines and those that
    start a line of its option list; flags its prose mentions (the
    server's, Slurm's) are another command's."""
    usage = text.split("\n\n", 1)[0]
    flags = set(FLAG.findall(usage))
    for lead in OPTION_LINE.findall(text):
        flags |= set(FLAG.findall(lead))
    return flags - GLOBAL


def cli_sections():
    """docs/cli.md's text under each `### kiln ...` heading (and its
    subheadings), by heading."""
    text = (SOURCE / "docs" / "cli.md").read_text()
    parts = re.split(r"^### ", text, flags=re.M)
    return {p.split("\n", 1)[0]: p for p in parts[1:]}


def section_for(command, sections):
    """Every section whose heading names `kiln COMMAND`."""
    pat = re.compile(rf"(?:\bkiln |\| ){re.escape(command)}(?![\w-])")
    return "\n".join(body for head, body in sections.items()
                     if pat.search(head))


def test_every_command_has_a_man_page_and_a_section():
    sections = cli_sections()
    missing = []
    for cmd in commands():
        page = kiln("man", cmd)
        if not page.startswith(".TH KILN\\-" + cmd + " 1"):
            missing.append(f"man page of {cmd}")
        if not section_for(cmd, sections):
            missing.append(f"docs/cli.md: no '### kiln {cmd}' section")
    assert not missing, "\n".join(missing)


def test_every_flag_is_in_the_man_page_and_docs_cli():
    sections = cli_sections()
    missing = []
    for cmd in commands():
        flags = help_flags(kiln(cmd, "--help"))
        page = kiln("man", cmd).replace("\\-", "-")
        doc = section_for(cmd, sections)
        for flag in sorted(flags):
            if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", page):
                missing.append(f"man kiln-{cmd}: {flag}")
            if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", doc):
                missing.append(f"docs/cli.md, kiln {cmd}: {flag}")
    assert not missing, ("flags --help names that the manuals do not:\n" +
                         "\n".join(missing))


def test_kiln_1_lists_every_command():
    page = kiln("man")
    missing = [c for c in commands() if f"kiln\\-{c} (1)" not in page]
    assert not missing, missing


def normalize(path):
    return re.sub(r"\{[^}]*\}", "{}", path)


def test_every_route_is_in_docs_api():
    doc = (SOURCE / "docs" / "api.md").read_text()
    documented = {(m, normalize(p)) for m, p in
                  re.findall(r"`(GET|POST|PUT|PATCH|DELETE) (/[^`\s?]*)", doc)}
    routes = set()
    for src in sorted((SOURCE / "src" / "server").glob("*.c")):
        for method, path in ROUTE.findall(src.read_text()):
            routes.add((method, path))
    assert len(routes) > 30, "no route tables found in src/server"
    missing = sorted(f"{m} {p}" for m, p in routes
                     if (m, normalize(p)) not in documented)
    assert not missing, ("routes the server serves that docs/api.md does "
                         "not list:\n" + "\n".join(missing))


def test_completion_offers_every_command_and_flag():
    bash = kiln("completion", "bash")
    zsh = kiln("completion", "zsh")
    for cmd in commands():
        assert f"        {cmd}) opts='" in bash, cmd
        assert f"        '{cmd}:" in zsh, cmd
    # A command's flags, from its help: submit's --wait, logs' --follow.
    assert re.search(r"submit\) opts='[^']*--wait", bash)
    assert re.search(r"logs\) opts='[^']*--follow", bash)
    for shell in ("bash", "zsh"):
        if subprocess.run(["which", shell], capture_output=True).returncode:
            continue
        res = subprocess.run([shell, "-n"], input=kiln("completion", shell),
                             capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
