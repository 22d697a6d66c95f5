"""A local stand-in for the three Azure endpoints the `azure` pool
provider calls, answering in the formats of Azure's REST reference (no
Azure is reachable here) and recording every request so tests check
exactly what kiln sent:

- IMDS: GET /metadata/identity/oauth2/token (managed identity), which
  wants `Metadata: true`, api-version 2018-02-01 and resource
  https://management.azure.com/; expires_in comes as a string, as IMDS
  sends it.
- Entra ID: POST /TENANT/oauth2/v2.0/token (client credentials), form
  encoded, scope https://management.azure.com/.default.
- ARM, Compute api-version 2024-07-01, Bearer token required:
  GET/PATCH the scale set, GET .../virtualMachines, POST .../delete.
  A PATCH answers 200 with an Azure-AsyncOperation header; the operation
  reads InProgress once, then Succeeded, when the new VMs turn from
  Creating to Succeeded (or InProgress for as long as `hold` is set).
  A delete answers 202 with only a Location header
  (the other polling style): 202 once, then 200 when the VM is gone.

`fail` queues answers to play instead of the real one, per (method,
kind), kind being "vmss", "vms" or "delete": (status, body, headers)."""
import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

SUB = "7d1f4e9a-3c2b-4a8e-9f10-2b6c5d4e3f21"
ID = (f"/subscriptions/{SUB}/resourceGroups/rg-kiln/providers/"
      "Microsoft.Compute/virtualMachineScaleSets/kilnaz")
API = "2024-07-01"
RESOURCE = "https://management.azure.com/"


def base36(n, width=6):
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while n:
        out = digits[n % 36] + out
        n //= 36
    return out.rjust(width, "0")


class ScaleSetApi:
    def __init__(self, sku="Standard_NC48ads_A100_v4", tenant="tenant-1",
                 client_id="app-1", client_secret=None, mi_client_id=None):
        self.sku = sku
        self.tenant = tenant
        self.client_id = client_id
        self.client_secret = client_secret
        self.mi_client_id = mi_client_id
        self.token = "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9." + uuid.uuid4().hex
        self.vms = []          # the scale set's VMs, in order
        self.next_instance = 0
        self.operations = {}   # id -> {"polls": n, "done": fn}
        self.requests = []
        self.fail = {}
        self.problems = []     # requests that broke a rule above
        self.hold = False      # operations stay InProgress while set
        self.lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def answer(self, status, body=None, headers=()):
                data = b"" if body is None else json.dumps(body).encode()
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def handle_any(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode() if length else ""
                url = urlsplit(self.path)
                query = parse_qs(url.query)
                with api.lock:
                    api.requests.append({
                        "method": self.command, "path": url.path,
                        "query": query, "headers": dict(self.headers),
                        "body": body})
                    status, doc, headers = api.route(
                        self.command, url.path, query, self.headers, body,
                        f"http://{self.headers['Host']}")
                self.answer(status, doc, headers)

            do_GET = do_POST = do_PATCH = handle_any

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    # ---- what Azure would hold ----

    def add_vm(self, state="Succeeded", zone="1"):
        n = self.next_instance
        self.next_instance += 1
        vm = {
            "name": f"kilnaz_{n}",
            "id": f"{ID}/virtualMachines/{n}",
            "type": "Microsoft.Compute/virtualMachineScaleSets/"
                    "virtualMachines",
            "location": "westus2",
            "instanceId": str(n),
            "zones": [zone],
            "sku": {"name": self.sku, "tier": "Standard"},
            "properties": {
                "latestModelApplied": True,
                "vmId": str(uuid.uuid4()),
                "hardwareProfile": {},
                "osProfile": {"computerName": f"kilnaz{base36(n)}",
                              "adminUsername": "azureuser",
                              "linuxConfiguration": {
                                  "disablePasswordAuthentication": True}},
                "provisioningState": state,
            },
        }
        self.vms.append(vm)
        return vm

    def scale_set(self, state="Succeeded"):
        return {
            "name": "kilnaz", "id": ID,
            "type": "Microsoft.Compute/virtualMachineScaleSets",
            "location": "westus2",
            "sku": {"name": self.sku, "tier": "Standard",
                    "capacity": len(self.vms)},
            "properties": {
                "singlePlacementGroup": False,
                "upgradePolicy": {"mode": "Manual"},
                "provisioningState": state,
                "uniqueId": "b5a1c2d3-0000-4000-8000-123456789abc",
            },
        }

    def calls(self, method=None, kind=None):
        with self.lock:
            return [r for r in self.requests
                    if (method is None or r["method"] == method)
                    and (kind is None or self.kind(r["path"]) == kind)]

    @staticmethod
    def kind(path):
        if path == ID:
            return "vmss"
        if path == ID + "/virtualMachines":
            return "vms"
        if path == ID + "/delete":
            return "delete"
        if "/operations/" in path:
            return "operation"
        if path.endswith("/oauth2/token") or path.endswith("/v2.0/token"):
            return "token"
        return None

    # ---- the endpoints ----

    def route(self, method, path, query, headers, body, base):
        if path == "/metadata/identity/oauth2/token" and method == "GET":
            return self.imds(query, headers)
        if path == f"/{self.tenant}/oauth2/v2.0/token" and method == "POST":
            return self.login(headers, body)
        if headers.get("Authorization") != f"Bearer {self.token}":
            return 401, {"error": {
                "code": "InvalidAuthenticationToken",
                "message": "The access token is invalid."}}, []
        if query.get("api-version") != [API]:
            self.problems.append(f"{method} {path}: api-version {query}")
            return 400, {"error": {
                "code": "InvalidApiVersionParameter",
                "message": "The api-version is invalid."}}, []
        kind = self.kind(path)
        queued = self.fail.get((method, kind))
        if queued:
            status, doc, extra = queued.pop(0)
            return status, doc, extra
        if kind == "vmss" and method == "GET":
            return 200, self.scale_set(), []
        if kind == "vmss" and method == "PATCH":
            return self.patch(body, base)
        if kind == "vms" and method == "GET":
            return 200, {"value": self.vms}, []
        if kind == "delete" and method == "POST":
            return self.delete(body, base)
        if kind == "operation" and method == "GET":
            return self.operation(path)
        return 404, {"error": {"code": "NotFound",
                               "message": f"{method} {path}"}}, []

    def imds(self, query, headers):
        want = {"api-version": ["2018-02-01"], "resource": [RESOURCE]}
        if self.mi_client_id:
            want["client_id"] = [self.mi_client_id]
        if headers.get("Metadata") != "true" or query != want:
            self.problems.append(f"IMDS: {dict(headers)} {query}")
            return 400, {"error": "invalid_request",
                         "error_description": "Required metadata header "
                                              "not specified"}, []
        return 200, {"access_token": self.token,
                     "client_id": self.mi_client_id or "system",
                     "expires_in": "86399", "expires_on": "1796400000",
                     "ext_expires_in": "86399", "not_before": "1796313300",
                     "resource": RESOURCE, "token_type": "Bearer"}, []

    def login(self, headers, body):
        form = parse_qs(body)
        want = {"grant_type": ["client_credentials"],
                "client_id": [self.client_id],
                "scope": [RESOURCE + ".default"],
                "client_secret": [self.client_secret]}
        if (headers.get("Content-Type")
                != "application/x-www-form-urlencoded" or form != want):
            self.problems.append(f"login: {form}")
            return 401, {"error": "invalid_client",
                         "error_description": "AADSTS7000215: Invalid "
                                              "client secret provided."}, []
        return 200, {"token_type": "Bearer", "expires_in": 3599,
                     "ext_expires_in": 3599, "access_token": self.token}, []

    def new_operation(self, base, done, location):
        op = uuid.uuid4().hex
        self.operations[op] = {"polls": 0, "done": done,
                               "location": location}
        url = (f"{base}/subscriptions/{SUB}/providers/Microsoft.Compute/"
               f"locations/westus2/operations/{op}?api-version={API}")
        if location:
            url += "&monitor=true"
        return url

    def patch(self, body, base):
        try:
            capacity = json.loads(body)["sku"]["capacity"]
        except (ValueError, KeyError, TypeError):
            return 400, {"error": {"code": "InvalidRequestContent",
                                   "message": body}}, []
        new = [self.add_vm(state="Creating")
               for _ in range(max(0, capacity - len(self.vms)))]

        def done():
            for vm in new:
                vm["properties"]["provisioningState"] = "Succeeded"
        url = self.new_operation(base, done, False)
        return 200, self.scale_set(state="Updating"), [
            ("Azure-AsyncOperation", url), ("Retry-After", "0")]

    def delete(self, body, base):
        try:
            ids = json.loads(body)["instanceIds"]
        except (ValueError, KeyError, TypeError):
            return 400, {"error": {"code": "InvalidRequestContent",
                                   "message": body}}, []
        doomed = [vm for vm in self.vms if vm["instanceId"] in ids]
        for vm in doomed:
            vm["properties"]["provisioningState"] = "Deleting"

        def done():
            for vm in doomed:
                self.vms.remove(vm)
        url = self.new_operation(base, done, True)
        return 202, None, [("Location", url), ("Retry-After", "0")]

    def operation(self, path):
        op = self.operations.get(path.rsplit("/", 1)[1])
        if not op:
            return 404, {"error": {"code": "NotFound",
                                   "message": path}}, []
        op["polls"] += 1
        if op["polls"] == 1 or self.hold:
            if op["location"]:
                return 202, None, [("Retry-After", "0")]
            return 200, {"startTime": "2026-12-03T07:00:00.0000000+00:00",
                         "status": "InProgress",
                         "name": path.rsplit("/", 1)[1]}, [
                ("Retry-After", "0")]
        if op["done"]:
            op["done"]()
            op["done"] = None
        if op["location"]:
            return 200, None, []
        return 200, {"startTime": "2026-12-03T07:00:00.0000000+00:00",
                     "endTime": "2026-12-03T07:00:31.0000000+00:00",
                     "status": "Succeeded",
                     "name": path.rsplit("/", 1)[1]}, []
