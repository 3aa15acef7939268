"""Read a parsed OpenAPI 3 document into per-endpoint states, the facts a change-event log tracks.

This follows the extraction rules of the apidrift reference data (rules 2-6):

* An endpoint is one operation (an HTTP method under a path). Its identity key is the method and
  the path with every ``{name}`` replaced by ``{}`` (``change_events.endpoint_key``), optionally
  prefixed with the server host taken from the operation's, the path's or the document's
  ``servers`` (the first entry, its variables replaced by their defaults).
* ``params``: the non-path parameters (path-level and operation-level merged, the operation's
  winning on the same name and location) plus the top-level property names of every request-body
  schema. ``$ref`` (local, ``#/...``) is followed, ``allOf`` is merged, ``anyOf``/``oneOf`` branches
  are unioned and arrays are looked through.
* ``required``: parameters with ``required: true``, body properties listed in ``required`` at the
  top of the schema or inside ``allOf`` (requirements of ``anyOf``/``oneOf`` branches do not
  count: a branch is one alternative, not an obligation).
* ``nested``: the dotted names of properties at depth 2 and 3 below each param, under the same
  rules; ``nested_required`` the ones their parent's schema requires.
* ``deprecated``: the operation's own flag; ``deprecated_params``: parameters or body property
  schemas with ``deprecated: true``. Descriptions are never read.

Response schemas, enums, types and formats are not captured. Only OpenAPI 3.x is read: a Swagger
2.0 document is refused with a ``SpecError`` rather than misread.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping
from urllib.parse import unquote, urlsplit

import yaml

from ...core.strict_json import json_nesting_within, tree_shape
from .change_events import endpoint_key

HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")

#: Nested names go this deep below a param (``param.child.grandchild``), as in the reference logs.
NESTED_DEPTH = 3
# How deep a spec document may nest, and how many schemas deep (through $ref, items, allOf,
# anyOf, oneOf) a parameter's schema may be expanded: far beyond what an API description
# needs, and well within the interpreter's recursion limit, so a hostile or broken file is
# named instead of ending the command in a RecursionError.
MAX_SPEC_NESTING = 200
# How many values a YAML spec may hold written out, per byte of its text (and at least
# MIN_SPEC_VALUES): text without aliases holds fewer values than bytes, and a few anchored
# schemas repeated take a few times more; ten aliases of ten aliases of ten..., a few hundred
# bytes, hold billions, which every later walk over the document would visit.
MAX_SPEC_VALUES_PER_BYTE = 8
MIN_SPEC_VALUES = 100_000

# The C loader parses multi-megabyte specs several times faster; fall back when libyaml is absent.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class SpecError(ValueError):
    """A spec version that cannot be read; the message names the file, the commit and the problem."""

    def __init__(self, path: str, commit: str | None, message: str) -> None:
        self.path, self.commit = path, commit
        where = f"{path} at commit {commit[:12]}" if commit else path
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True)
class EndpointState:
    """What a change-event log knows about one endpoint in one spec version."""

    api: str
    operation_id: str | None
    params: frozenset[str]
    required: frozenset[str]
    deprecated: bool
    # Nested names as property paths, e.g. ("payment_method_options", "card", "network"); the
    # logs spell them dotted (``dotted``), but a path keeps parents unambiguous when names hold dots.
    nested: frozenset[tuple[str, ...]] = frozenset()
    nested_required: frozenset[tuple[str, ...]] = frozenset()
    deprecated_params: frozenset[str] = frozenset()

    @property
    def key(self) -> str:
        return endpoint_key(self.api)


def dotted(names: Iterable[tuple[str, ...]]) -> tuple[str, ...]:
    """Nested property paths as the sorted dotted names a log lists."""
    return tuple(sorted({".".join(name) for name in names}))


def load_document(data: bytes, path: str, commit: str | None = None) -> dict[str, Any]:
    """Decode one spec file (JSON when the name ends in ``.json``, else YAML) into a mapping."""
    too_deep = SpecError(path, commit, f"nested more than {MAX_SPEC_NESTING} levels deep (the most a spec may nest)")
    try:
        if path.endswith(".json"):
            document = json.loads(data)
            if not json_nesting_within(data, MAX_SPEC_NESTING):
                raise too_deep
        else:
            document = yaml.load(data, Loader=_YAML_LOADER)
            depth, size = tree_shape(document)  # (an alias is walked once)
            if depth > MAX_SPEC_NESTING:
                raise too_deep
            most = max(MIN_SPEC_VALUES, MAX_SPEC_VALUES_PER_BYTE * len(data))
            if size > most:
                raise SpecError(path, commit, f"its aliases expand to more than {most:,} values "
                                f"({MAX_SPEC_VALUES_PER_BYTE} per byte of the file): not an API description")
    except RecursionError:
        raise too_deep from None
    except json.JSONDecodeError as exc:
        raise SpecError(path, commit, f"expected JSON, got a syntax error at line {exc.lineno}: {exc.msg}") from None
    except yaml.YAMLError as exc:
        raise SpecError(path, commit, f"expected YAML, got a syntax error: {' '.join(str(exc).split())}") from None
    except UnicodeDecodeError as exc:
        raise SpecError(path, commit, f"expected UTF-8 text: {exc.reason}") from None
    if not isinstance(document, dict):
        raise SpecError(path, commit, f"expected an OpenAPI document (a mapping), got {type(document).__name__}")
    return document


def spec_version_label(document: Mapping[str, Any], path: str, commit: str | None = None) -> str:
    """The document's ``info.version`` as text (YAML may have read an unquoted date)."""
    info = document.get("info")
    version = info.get("version") if isinstance(info, dict) else None
    if version is None or str(version) == "":
        raise SpecError(path, commit, "expected info.version (or use --version-from tag)")
    return str(version)


def endpoint_states(
    document: Mapping[str, Any], path: str, commit: str | None = None, *, with_host: bool = False
) -> dict[str, EndpointState]:
    """Every endpoint of one OpenAPI 3 document, by identity key, in document order.

    When two operations share a key (paths differing only in path-parameter names), the first
    one in document order is kept.
    """
    doc = _Document(document, path, commit)
    doc.check_openapi3()
    paths = document.get("paths") or {}  # absent or empty (``paths:`` in YAML): no endpoints
    if not isinstance(paths, dict):
        raise doc.error("paths", f"expected a mapping of paths, got {type(paths).__name__}")
    states: dict[str, EndpointState] = {}
    for raw_path, raw_item in paths.items():
        where = f"paths.{raw_path}"
        item = doc.resolve(raw_item, where)
        if not isinstance(item, dict):
            raise doc.error(where, f"expected a path item (a mapping), got {type(item).__name__}")
        for method in HTTP_METHODS:
            if method not in item:
                continue
            state = _operation_state(doc, str(raw_path), item, method, with_host)
            states.setdefault(state.key, state)
    return states


# --- the document: refs, errors ---------------------------------------------------------------


class _Document:
    """A parsed document with local ``$ref`` resolution and errors that say where."""

    def __init__(self, root: Mapping[str, Any], path: str, commit: str | None) -> None:
        self.root, self.path, self.commit = root, path, commit
        self._targets: dict[str, Any] = {}

    def error(self, where: str, message: str) -> SpecError:
        return SpecError(self.path, self.commit, f"{where}: {message}")

    def check_openapi3(self) -> None:
        if "swagger" in self.root:
            raise SpecError(
                self.path, self.commit, f"Swagger {self.root['swagger']} is not supported; expected OpenAPI 3.x"
            )
        version = str(self.root.get("openapi", ""))
        if not version.startswith("3."):
            raise SpecError(self.path, self.commit, f"expected an 'openapi: 3.x' field, got {version or 'none'!r}")

    def target(self, ref: Any, where: str) -> Any:
        """The node a local ``$ref`` points at (JSON pointer, ``~0``/``~1`` and %-escapes undone)."""
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise self.error(where, f"expected a local $ref ('#/...'), got {ref!r}")
        if ref not in self._targets:
            node: Any = self.root
            for token in ref[1:].split("/")[1:]:
                token = unquote(token).replace("~1", "/").replace("~0", "~")
                if isinstance(node, dict) and token in node:
                    node = node[token]
                elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                    node = node[int(token)]
                else:
                    raise self.error(where, f"$ref {ref!r} points at nothing")
            self._targets[ref] = node
        return self._targets[ref]

    def resolve(self, node: Any, where: str) -> Any:
        """Follow a chain of ``$ref`` to a concrete node (a ref loop is an error)."""
        seen: list[str] = []
        while isinstance(node, dict) and "$ref" in node:
            ref = node["$ref"]
            if ref in seen:
                raise self.error(where, f"$ref loop {' -> '.join(seen + [ref])}")
            seen.append(ref)
            node = self.target(ref, where)
        return node


# --- schemas ----------------------------------------------------------------------------------


@dataclass
class _ObjectView:
    """The properties an object schema offers once refs, compositions and arrays are flattened."""

    properties: dict[str, list[Any]] = field(default_factory=dict)  # name -> every schema declaring it
    required: set[str] = field(default_factory=set)
    deprecated: set[str] = field(default_factory=set)


def _object_view(doc: _Document, schemas: Iterable[Any], where: str) -> _ObjectView:
    """Flatten ``schemas`` (alternatives of one value) into one view of their properties."""
    view = _ObjectView()
    merged: dict[int, bool] = {}
    for schema in schemas:
        _merge_into(view, doc, schema, where, active=frozenset(), count_required=True, depth=1, merged=merged)
    view.required &= view.properties.keys()
    return view


def _merge_into(
    view: _ObjectView, doc: _Document, node: Any, where: str, active: frozenset[str], count_required: bool,
    depth: int, merged: dict[int, bool],
) -> None:
    # ``active`` holds the refs being expanded on this branch, so a schema that includes itself
    # (through allOf, a branch or array items) is cut off instead of recursing forever; a chain
    # of distinct refs is bounded by ``depth``. ``merged`` holds the schemas (by object: a $ref's
    # target, a YAML alias) already merged into ``view``, and whether with their requirements:
    # merging one again changes nothing, and ten refs to a schema of ten refs to... would take
    # exponential time.
    if depth > MAX_SPEC_NESTING:
        raise doc.error(where, f"a schema nests more than {MAX_SPEC_NESTING} schemas deep through $ref, items, "
                               "allOf, anyOf or oneOf (the most a spec may nest)")
    depth += 1
    if isinstance(node, dict) and "$ref" in node:
        ref = node["$ref"]
        if ref in active:
            return
        _merge_into(view, doc, doc.target(ref, where), where, active | {ref}, count_required, depth, merged)
        return
    if not isinstance(node, dict):
        return
    before = merged.get(id(node))
    if before is True or (before is False and not count_required):
        return
    merged[id(node)] = count_required
    properties = node.get("properties")
    if isinstance(properties, dict):
        for name, schema in properties.items():
            view.properties.setdefault(str(name), []).append(schema)
            resolved = doc.resolve(schema, where)
            if isinstance(resolved, dict) and resolved.get("deprecated") is True:
                view.deprecated.add(str(name))
    if count_required and isinstance(node.get("required"), list):
        view.required.update(str(name) for name in node["required"])
    if "items" in node:  # arrays are looked through: an array of objects offers the objects' properties
        _merge_into(view, doc, node["items"], where, active, count_required, depth, merged)
    for branch in _list(node.get("allOf")):
        _merge_into(view, doc, branch, where, active, count_required, depth, merged)
    for keyword in ("anyOf", "oneOf"):
        for branch in _list(node.get(keyword)):
            _merge_into(view, doc, branch, where, active, False, depth, merged)


def _nested_names(
    doc: _Document, name: str, schemas: list[Any], where: str
) -> tuple[set[tuple[str, ...]], set[tuple[str, ...]]]:
    """Names at depth 2..NESTED_DEPTH below param ``name`` (as paths of property names, since
    names may themselves contain dots), and the ones their parent's schema requires."""
    names: set[tuple[str, ...]] = set()
    required: set[tuple[str, ...]] = set()
    frontier: list[tuple[tuple[str, ...], list[Any]]] = [((name,), schemas)]
    for _ in range(NESTED_DEPTH - 1):
        deeper = []
        for prefix, declaring in frontier:
            view = _object_view(doc, declaring, where)
            for child, child_schemas in view.properties.items():
                path = prefix + (child,)
                names.add(path)
                if child in view.required:
                    required.add(path)
                deeper.append((path, child_schemas))
        frontier = deeper
    return names, required


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


# --- operations -------------------------------------------------------------------------------


@dataclass
class _Param:
    """One param as gathered from parameters and body schemas (a name can come from both)."""

    schemas: list[Any] = field(default_factory=list)
    required: bool = False
    deprecated: bool = False


def _operation_state(doc: _Document, path: str, item: dict[str, Any], method: str, with_host: bool) -> EndpointState:
    where = f"paths.{path}.{method}"
    operation = doc.resolve(item[method], where)
    if not isinstance(operation, dict):
        raise doc.error(where, f"expected an operation (a mapping), got {type(operation).__name__}")
    params: dict[str, _Param] = {}
    for parameter in _merged_parameters(doc, item, operation, where):
        if parameter["in"] == "path":
            continue
        param = params.setdefault(str(parameter["name"]), _Param())
        param.required |= parameter.get("required") is True
        param.deprecated |= parameter.get("deprecated") is True
        param.schemas.extend(_parameter_schemas(parameter))
    body = _request_body_view(doc, operation, where)
    for name, schemas in body.properties.items():
        param = params.setdefault(name, _Param())
        param.schemas.extend(schemas)
        param.required |= name in body.required
        param.deprecated |= name in body.deprecated
    nested: set[tuple[str, ...]] = set()
    nested_required: set[tuple[str, ...]] = set()
    for name, param in params.items():
        names, required = _nested_names(doc, name, param.schemas, where)
        nested |= names
        nested_required |= required
    operation_id = operation.get("operationId")
    prefix = _server_prefix(doc, operation, item) if with_host else ""
    return EndpointState(
        api=f"{method.upper()} {prefix}{path}",
        operation_id=None if operation_id is None else str(operation_id),
        params=frozenset(params),
        required=frozenset(n for n, p in params.items() if p.required),
        deprecated=operation.get("deprecated") is True,
        nested=frozenset(nested),
        nested_required=frozenset(nested_required),
        deprecated_params=frozenset(n for n, p in params.items() if p.deprecated),
    )


def _merged_parameters(
    doc: _Document, item: dict[str, Any], operation: dict[str, Any], where: str
) -> list[dict[str, Any]]:
    """Path-level then operation-level parameters; the operation's wins on the same (name, in)."""
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for level, owner in (("path", item), ("operation", operation)):
        raw = owner.get("parameters", [])
        if not isinstance(raw, list):
            raise doc.error(f"{where}.parameters", f"expected a list at {level} level, got {type(raw).__name__}")
        for i, entry in enumerate(raw):
            parameter = doc.resolve(entry, f"{where}.parameters[{i}]")
            if not isinstance(parameter, dict) or "name" not in parameter or "in" not in parameter:
                raise doc.error(f"{where}.parameters[{i}]", "expected a parameter with 'name' and 'in'")
            merged[(str(parameter["name"]), str(parameter["in"]))] = parameter
    return list(merged.values())


def _parameter_schemas(parameter: dict[str, Any]) -> list[Any]:
    """A parameter's schema, or the schemas of its ``content`` media types."""
    if "schema" in parameter:
        return [parameter["schema"]]
    content = parameter.get("content")
    if isinstance(content, dict):
        return [media["schema"] for media in content.values() if isinstance(media, dict) and "schema" in media]
    return []


def _request_body_view(doc: _Document, operation: dict[str, Any], where: str) -> _ObjectView:
    """The top-level properties of every media type's request-body schema, merged."""
    if "requestBody" not in operation:
        return _ObjectView()
    body = doc.resolve(operation["requestBody"], f"{where}.requestBody")
    content = body.get("content") if isinstance(body, dict) else None
    if not isinstance(content, dict):
        return _ObjectView()
    schemas = [media["schema"] for media in content.values() if isinstance(media, dict) and "schema" in media]
    return _object_view(doc, schemas, f"{where}.requestBody")


def _server_prefix(doc: _Document, operation: dict[str, Any], item: dict[str, Any]) -> str:
    """``api.twilio.com`` from the nearest ``servers`` (operation, path, document); '' if none."""
    for owner in (operation, item, doc.root):
        servers = owner.get("servers")
        if isinstance(servers, list) and servers and isinstance(servers[0], dict) and "url" in servers[0]:
            url = _expand_server_variables(servers[0])
            parts = urlsplit(url)
            prefix = parts.netloc + parts.path if parts.netloc else parts.path
            return prefix.rstrip("/")
    return ""


def _expand_server_variables(server: dict[str, Any]) -> str:
    url = str(server["url"])
    variables = server.get("variables")
    if isinstance(variables, dict):
        for name, spec in variables.items():
            if isinstance(spec, dict) and "default" in spec:
                url = url.replace("{" + str(name) + "}", str(spec["default"]))
    return url
