"""The OpenAPI document: served without a token, the same as `kiln
openapi` and docs/openapi.json, a valid OpenAPI 3.1 description (its
schemas valid JSON Schema 2020-12, the dialect OpenAPI 3.1 uses), and
its roles the ones the server enforces."""
import json
import re
import subprocess
from pathlib import Path

import requests
from jsonschema import Draft202012Validator, RefResolver

from conftest import KILN

REPO = Path(__file__).resolve().parents[2]
METHODS = ("get", "put", "post", "delete", "patch", "head", "options")

# The parts of the OpenAPI 3.1 object model the document uses, as JSON
# Schema: the official meta-schema is not packaged by Debian, so the
# rules kept here are the specification's for these objects.
NON_EMPTY = {"type": "string", "minLength": 1}
MEDIA = {"type": "object", "additionalProperties": {
    "type": "object", "properties": {"schema": {"type": "object"}},
    "additionalProperties": False}}
OPERATION = {
    "type": "object",
    "required": ["responses", "operationId", "summary"],
    "properties": {
        "operationId": NON_EMPTY, "summary": NON_EMPTY,
        "tags": {"type": "array", "items": NON_EMPTY},
        "parameters": {"type": "array", "items": {
            "type": "object", "required": ["name", "in", "schema"],
            "properties": {"name": NON_EMPTY,
                           "in": {"enum": ["query", "header", "path",
                                          "cookie"]},
                           "required": {"type": "boolean"},
                           "schema": {"type": "object"}},
            "additionalProperties": False}},
        "requestBody": {"type": "object", "required": ["content"],
                        "properties": {"content": MEDIA,
                                       "required": {"type": "boolean"}},
                        "additionalProperties": False},
        "responses": {
            "type": "object", "minProperties": 1,
            "propertyNames": {"pattern": "^([1-5][0-9X]{2}|default)$"},
            "additionalProperties": {
                "type": "object", "required": ["description"],
                "properties": {"description": {"type": "string"},
                               "content": MEDIA},
                "additionalProperties": False}},
        "security": {"type": "array"},
    },
    "patternProperties": {"^x-": {}},
    "additionalProperties": False,
}
OPENAPI_31 = {
    "type": "object",
    "required": ["openapi", "info", "paths", "components"],
    "properties": {
        "openapi": {"type": "string", "pattern": r"^3\.1\.\d+$"},
        "info": {"type": "object", "required": ["title", "version"],
                 "properties": {"title": NON_EMPTY, "version": NON_EMPTY}},
        "servers": {"type": "array", "items": {
            "type": "object", "required": ["url"]}},
        "security": {"type": "array"},
        "paths": {"type": "object",
                  "propertyNames": {"pattern": "^/"},
                  "additionalProperties": {
                      "type": "object",
                      "propertyNames": {"enum": list(METHODS)},
                      "additionalProperties": OPERATION}},
        "components": {"type": "object", "properties": {
            "schemas": {"type": "object"},
            "securitySchemes": {"type": "object"}}},
    },
    "patternProperties": {"^x-": {}},
    "additionalProperties": False,
}


def operations(doc):
    for template, item in doc["paths"].items():
        for method, op in item.items():
            yield template, method, op


def test_served_without_token_and_same_as_cli_and_repo(server):
    r = requests.get(server.url + "/v1/openapi.json", timeout=10)
    assert r.status_code == 200, r.text
    served = r.json()
    printed = json.loads(subprocess.run(
        [KILN, "openapi"], capture_output=True, text=True, check=True).stdout)
    assert served == printed
    in_repo = json.loads((REPO / "docs" / "openapi.json").read_text())
    assert in_repo == printed, "docs/openapi.json is stale: run make openapi"


def test_document_is_valid_openapi_31():
    doc = json.loads(subprocess.run(
        [KILN, "openapi"], capture_output=True, text=True, check=True).stdout)
    Draft202012Validator(OPENAPI_31).validate(doc)
    resolver = RefResolver("", doc)
    for name, schema in doc["components"]["schemas"].items():
        Draft202012Validator.check_schema(schema)
        # An object's examples are answers its schema accepts.
        for example in schema.get("examples", []):
            Draft202012Validator(schema, resolver=resolver).validate(example)
    op_ids = set()
    schemes = doc["components"]["securitySchemes"]
    for template, method, op in operations(doc):
        assert op["operationId"] not in op_ids, op["operationId"]
        op_ids.add(op["operationId"])
        # Every path capture is a required path parameter, and only those.
        captures = set(re.findall(r"\{([^}]+)\}", template))
        path_params = {p["name"] for p in op["parameters"]
                       if p["in"] == "path"}
        assert captures == path_params, (method, template)
        assert all(p["required"] for p in op["parameters"]
                   if p["in"] == "path")
        for p in op["parameters"]:
            Draft202012Validator.check_schema(p["schema"])
        for answer in op["responses"].values():
            for media in answer.get("content", {}).values():
                Draft202012Validator.check_schema(media["schema"])
        for requirement in op.get("security", doc["security"]):
            assert set(requirement) <= set(schemes)
        assert op["x-kiln-role"] in ("none", "viewer", "user", "operator",
                                     "admin")


def test_documented_roles_are_enforced(server):
    """A viewer is refused (403) every route the document says needs a
    higher role, no route marked public asks for a token, and every
    other one does (401)."""
    doc = server.request("GET", "/v1/openapi.json").json()
    viewer = server.create_token("peek", "viewer")
    refused = 0
    for template, method, op in operations(doc):
        path = re.sub(r"\{[^}]+\}", "1", template)
        if op["x-kiln-role"] == "none":
            r = server.request(method.upper(), path, token=None)
            assert r.status_code != 401, (method, template)
            continue
        r = server.request(method.upper(), path, token=None)
        assert r.status_code == 401, (method, template, r.text)
        if op["x-kiln-role"] != "viewer":
            r = server.request(method.upper(), path, token=viewer)
            assert r.status_code == 403, (method, template, r.text)
            assert r.json()["error"]["code"] == "permission_denied"
            refused += 1
    assert refused > 20
