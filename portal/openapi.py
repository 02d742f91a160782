"""The OpenAPI 3.1 document of the portal's API (served at /api/v1/openapi.json). Pure.

The envelope's schema comes from the pydantic model (shared/envelope.py), so the API and the
published JSON Schema (schemas/validation-result-v1.json) cannot disagree.
"""

from typing import Any, Final

from shared.envelope import State, ValidationResult
from shared.schema_docs import DocumentedSchema

Obj = dict[str, Any]
API_VERSION: Final = "v1"
MAX_LIMIT: Final = 1000
DEFAULT_LIMIT: Final = 100
MAX_FLEET_ROWS: Final = 1000
DEFAULT_FLEET_ROWS: Final = 200
NAME = {"type": "string", "minLength": 1, "maxLength": 253}
_ERROR = {"$ref": "#/components/schemas/Error"}


def _json(schema: Obj, description: str) -> Obj:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*codes: int) -> Obj:
    text = {
        400: "Bad request",
        401: "No or invalid credentials",
        429: "Too many failed authentications from this address",
        404: "Not found (or not visible to the caller)",
        503: "Not ready",
    }
    return {str(code): _json(_ERROR, text[code]) for code in codes}


def _query(name: str, schema: Obj, description: str) -> Obj:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


def _components() -> Obj:
    envelope = ValidationResult.model_json_schema(
        by_alias=True,
        mode="serialization",
        ref_template="#/components/schemas/{model}",
        schema_generator=DocumentedSchema,
    )
    schemas: Obj = dict(envelope.pop("$defs", {}))
    schemas["ValidationResult"] = envelope
    schemas["Error"] = {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "reason", "message"],
                "properties": {
                    "code": {"type": "integer"},
                    "reason": {"type": "string"},
                    "message": {"type": "string"},
                },
            }
        },
    }
    schemas["Check"] = {
        "type": "object",
        "required": ["id", "profile", "name", "registered"],
        "properties": {
            "id": {"type": "string", "description": "profile/check"},
            "profile": {"type": "string"},
            "name": {"type": "string"},
            "index": {"type": "integer"},
            "backend": {"type": "string"},
            "profileGeneration": {"type": "integer"},
            "sourceDigest": {"type": "string"},
            "freshnessSeconds": {"type": "integer", "description": "the window after which a result is Stale"},
            "registered": {"type": "boolean", "description": "false: only results name it (profile gone)"},
        },
    }
    schemas["ResultList"] = {
        "type": "object",
        "required": ["apiVersion", "items", "continue"],
        "properties": {
            "apiVersion": {"type": "string"},
            "items": {"type": "array", "items": {"$ref": "#/components/schemas/ValidationResult"}},
            "continue": {
                "type": ["string", "null"],
                "description": "pass as `continue` for the next page; null on the last page",
            },
        },
    }
    schemas["FleetCheck"] = {
        "type": "object",
        "required": ["check", "nodes", "results", "counts", "rows"],
        "properties": {
            "check": {"$ref": "#/components/schemas/Check"},
            "nodes": {"type": "integer", "description": "Nodes with a visible result of this check"},
            "results": {"type": "integer", "description": "visible results of this check, all Runs"},
            "counts": {
                "type": "object",
                "description": "Nodes by the state of their newest visible result",
                "required": [s.value for s in State],
                "properties": {s.value: {"type": "integer"} for s in State},
            },
            "rows": {
                "type": "array",
                "description": "the newest visible result per Node, worst state first, then by Node name",
                "items": {"$ref": "#/components/schemas/ValidationResult"},
            },
        },
    }
    schemas["NodeHealth"] = {
        "type": "object",
        "description": "The Node's fleet health and capacity now (only to callers who may list Nodes)",
        "required": ["ready", "allocatable", "signal", "operatorCordoned"],
        "properties": {
            "ready": {
                "type": "object",
                "required": ["status", "reason", "since"],
                "properties": {
                    "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                    "reason": {"type": "string"},
                    "since": {"type": ["string", "null"], "description": "lastTransitionTime"},
                },
            },
            "allocatable": {
                "type": "object",
                "required": ["gpu", "rdma"],
                "properties": {
                    "gpu": {"type": ["string", "null"], "description": "allocatable nvidia.com/gpu"},
                    "rdma": {
                        "type": "object",
                        "description": "allocatable resources of the rdma/ domain, by name",
                        "additionalProperties": {"type": "string"},
                    },
                },
            },
            "signal": {
                "description": "Signal's reservation of the Node (null: Signal does not hold it)",
                "anyOf": [
                    {
                        "type": "object",
                        "required": ["cordoned", "run"],
                        "properties": {
                            "cordoned": {"type": "boolean", "description": "Signal's reservation taint is set"},
                            "run": {
                                "description": "the holding Run (null unless the caller sees its workspace)",
                                "anyOf": [
                                    {
                                        "type": "object",
                                        "required": ["name", "namespace", "uid", "index"],
                                        "properties": {
                                            "name": {"type": ["string", "null"]},
                                            "namespace": {"type": ["string", "null"]},
                                            "uid": {"type": "string"},
                                            "index": {"type": ["integer", "null"]},
                                        },
                                    },
                                    {"type": "null"},
                                ],
                            },
                        },
                    },
                    {"type": "null"},
                ],
            },
            "operatorCordoned": {
                "type": "boolean",
                "description": "cordoned by someone other than Signal (spec.unschedulable or the unschedulable taint)",
            },
        },
    }
    schemas["NodeSummary"] = {
        "type": "object",
        "required": ["node", "uid", "health", "checks"],
        "properties": {
            "node": {"type": "string"},
            "uid": {
                "type": ["string", "null"],
                "description": "the Node's uid now (null: no such Node now, or the caller may not list Nodes)",
            },
            "health": {"anyOf": [{"$ref": "#/components/schemas/NodeHealth"}, {"type": "null"}]},
            "checks": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["check", "profile", "name", "registered", "state", "reason", "resultId"],
                    "properties": {
                        "check": {"type": "string"},
                        "profile": {"type": "string"},
                        "name": {"type": "string"},
                        "registered": {"type": "boolean"},
                        "state": {"type": "string", "enum": [s.value for s in State]},
                        "reason": {"type": "string"},
                        "resultId": {"type": ["string", "null"]},
                        "result": {"anyOf": [{"$ref": "#/components/schemas/ValidationResult"}, {"type": "null"}]},
                    },
                },
            },
        },
    }
    return schemas


def document() -> Obj:
    states = [s.value for s in State]
    list_params = [
        _query("node", NAME, "only results about this Node"),
        _query("check", {"type": "string", "minLength": 1, "maxLength": 128}, "profile/check, or a check name"),
        _query("state", {"type": "string", "enum": states}, "only results in this state"),
        _query("workspace", NAME, "only results of this namespace"),
        _query(
            "limit",
            {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
            "page size",
        ),
        _query("continue", {"type": "string", "minLength": 1, "maxLength": 2048}, "opaque token of the last page"),
    ]
    auth_errors = (400, 401, 429)  # 400: also credentials in the URL
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Project Signal portal",
            "version": API_VERSION,
            "description": (
                "Read-only validation results (projectsignal.dev/validation-result/v1). Every request is "
                "authorized for the caller's workspaces (namespaces); results elsewhere are invisible. "
                "Send a bearer token minted for the portal's audience (kubectl create token SA --audience "
                "signal-portal) in the Authorization header, never in the URL."
            ),
        },
        "paths": {
            "/api/v1/checks": {
                "get": {
                    "operationId": "listChecks",
                    "summary": "Registered checks (profile x check) and check types that have results",
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "required": ["items"],
                                "properties": {
                                    "items": {"type": "array", "items": {"$ref": "#/components/schemas/Check"}}
                                },
                            },
                            "checks",
                        ),
                        **_errors(*auth_errors),
                    },
                }
            },
            "/api/v1/fleet": {
                "get": {
                    "operationId": "getFleet",
                    "summary": "The fleet view: per visible check, Nodes by state and their newest results",
                    "parameters": [
                        _query(
                            "rows",
                            {"type": "integer", "minimum": 0, "maximum": MAX_FLEET_ROWS, "default": DEFAULT_FLEET_ROWS},
                            "at most this many Node rows per check",
                        )
                    ],
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "required": ["apiVersion", "items", "nodes"],
                                "properties": {
                                    "apiVersion": {"type": "string"},
                                    "items": {"type": "array", "items": {"$ref": "#/components/schemas/FleetCheck"}},
                                    "nodes": {
                                        "type": "object",
                                        "description": "health of the Nodes in the rows (empty unless the caller may "
                                        "list Nodes)",
                                        "additionalProperties": {"$ref": "#/components/schemas/NodeHealth"},
                                    },
                                },
                            },
                            "one item per check",
                        ),
                        **_errors(*auth_errors),
                    },
                }
            },
            "/api/v1/results": {
                "get": {
                    "operationId": "listResults",
                    "summary": "Results (envelopes without details), ordered by workspace, Node, check, Run uid",
                    "parameters": list_params,
                    "responses": {
                        "200": _json({"$ref": "#/components/schemas/ResultList"}, "a page of results"),
                        **_errors(*auth_errors),
                    },
                }
            },
            "/api/v1/results/{id}": {
                "get": {
                    "operationId": "getResult",
                    "summary": "One result with its details (the check evidence document)",
                    "parameters": [
                        {"name": "id", "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}
                    ],
                    "responses": {
                        "200": _json({"$ref": "#/components/schemas/ValidationResult"}, "the result"),
                        **_errors(404, *auth_errors),
                    },
                }
            },
            "/api/v1/nodes/{name}": {
                "get": {
                    "operationId": "getNode",
                    "summary": "One Node's summary: per check, the state of its newest visible result",
                    "parameters": [{"name": "name", "in": "path", "required": True, "schema": NAME}],
                    "responses": {
                        "200": _json({"$ref": "#/components/schemas/NodeSummary"}, "the Node's summary"),
                        **_errors(404, *auth_errors),
                    },
                }
            },
        },
        "security": [{"bearer": []}],
        "components": {
            "schemas": _components(),
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "a token minted for the portal's audience (--audience, default signal-portal)",
                }
            },
        },
    }
