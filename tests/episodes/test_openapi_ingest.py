"""``wpb ingest openapi``: the git walk and the command line (spec reading is in
``test_openapi_spec.py``, change labelling and revert times in ``test_openapi_changes.py``).

Every git repository here is built by the test in ``tmp_path`` with fixed dates, so commit
hashes and event dates are deterministic; nothing reads the network or shared data.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from wpb_gym.cli import main
from wpb_gym.episodes.real.change_events import read_events
from wpb_gym.episodes.real.openapi_changes import (
    Snapshot,
    diff_endpoints,
    replay_events,
    top_level,
)
from wpb_gym.episodes.real.openapi_ingest import UNRELEASED, IngestError, SpecSource, ingest_openapi, path_matches
from wpb_gym.episodes.real.openapi_spec import (
    EndpointState,
    endpoint_states,
)

# --- building specs ---------------------------------------------------------------------------


def spec(paths: dict[str, Any], version: str = "v1", **extra: Any) -> dict[str, Any]:
    return {"openapi": "3.0.3", "info": {"title": "t", "version": version}, "paths": paths, **extra}


def query(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "in": "query", "schema": {"type": "string"}, **extra}


def body(properties: dict[str, Any], required: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties, **extra}
    if required:
        schema["required"] = required
    return {"content": {"application/x-www-form-urlencoded": {"schema": schema}}}


def obj(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


S = {"type": "string"}


def states(document: dict[str, Any], **kwargs: Any) -> dict[str, EndpointState]:
    return endpoint_states(document, "spec.json", "c0ffee", **kwargs)


def one(document: dict[str, Any], **kwargs: Any) -> EndpointState:
    (state,) = states(document, **kwargs).values()
    return state


def nested(state: EndpointState) -> set[str]:
    return {".".join(path) for path in state.nested}


SNAP = Snapshot(seq=1, commit="abcdef0123456789", date="2021-01-02T00:00:00Z", version="v2")


def events_between(a: dict[str, Any], b: dict[str, Any]) -> list:
    return diff_endpoints(states(a), states(b), SNAP)


def only_event(a: dict[str, Any], b: dict[str, Any]):
    (event,) = events_between(a, b)
    return event


# --- documents and edits shared with test_openapi_spec.py and test_openapi_changes.py
YAML_SPEC = """\
openapi: 3.0.0
info: {title: t, version: '2017-08-15'}
paths:
  /v1/a/{id}:
    post:
      operationId: PostA
      parameters:
        - {name: a, in: query}
"""



BASE = spec(
    {
        "/v1/a/{id}": {
            "post": {
                "operationId": "PostA",
                "parameters": [query("expand")],
                "requestBody": body({"amount": S, "card": obj({"number": S, "exp": obj({"month": S})})}),
            }
        }
    }
)


def edit(doc: dict[str, Any], fn) -> dict[str, Any]:
    copy = json.loads(json.dumps(doc))
    fn(copy["paths"]["/v1/a/{id}"]["post"])
    return copy



# --- the git walk -----------------------------------------------------------------------------


class Repo:
    """A throwaway git repository with deterministic commits."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.day = 0
        root.mkdir(parents=True, exist_ok=True)
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str, date: str | None = None) -> str:
        env = {
            **os.environ,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@example.com",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.com",
            "GIT_CONFIG_NOSYSTEM": "1",
        }
        if date:
            env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = date
        done = subprocess.run(["git", "-C", str(self.root), *args], env=env, capture_output=True, text=True, check=True)
        return done.stdout.strip()

    def commit(self, files: dict[str, Any], *, days: float = 1.0, message: str = "change") -> str:
        """Write (dict: JSON, str: raw text, None: delete) and commit ``days`` after the last one."""
        for name, content in files.items():
            path = self.root / name
            if content is None:
                path.unlink()
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content if isinstance(content, str) else json.dumps(content, indent=1), encoding="utf-8")
        self.day += days
        date = f"{int(1609459200 + self.day * 86400)} +0000"  # from 2021-01-01
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", message, date=date)
        return self.git("rev-parse", "HEAD")


def ops(*names: str, version: str = "v1", **extra: Any) -> dict[str, Any]:
    """A spec whose one endpoint ``POST /v1/a/{id}`` has query params ``names``."""
    return spec(
        {"/v1/a/{id}": {"post": {"operationId": "PostA", "parameters": [query(n) for n in names]}}}, version, **extra
    )


def test_walk_labels_versions_skips_other_commits_and_seq_counts_silent_versions(tmp_path):
    repo = Repo(tmp_path / "r")
    first = repo.commit({"openapi/spec3.json": ops("a", "b")})
    repo.commit({"README.md": "docs only"})
    silent = ops("a", "b")
    silent["info"]["description"] = "prose only"
    repo.commit({"openapi/spec3.json": silent})  # a version with no endpoint change: seq 1, no event
    third = repo.commit({"openapi/spec3.json": ops("a", version="v2")}, days=0.5)
    result = ingest_openapi(repo.root, ["openapi/spec3.json"])
    assert result.versions == 3
    assert [(e.seq, e.commit, e.change, e.version) for e in result.events] == [
        (0, first[:10], ("initial",), "v1"),
        (2, third[:10], ("param_removed",), "v2"),
    ]
    assert result.events[0].date == "2021-01-02T00:00:00Z" and result.events[1].date == "2021-01-04T12:00:00Z"


def test_only_the_first_parent_history_is_walked(tmp_path):
    repo = Repo(tmp_path / "r")
    repo.commit({"s.json": ops("a")})
    repo.git("checkout", "-q", "-b", "side")
    repo.commit({"s.json": ops("a", "side1")})
    repo.commit({"s.json": ops("a", "side2")})
    repo.git("checkout", "-q", "main")
    repo.commit({"other.txt": "x"})
    repo.git("merge", "-q", "--no-ff", "side", "-m", "merge side", date="1610000000 +0000")
    merge = repo.git("rev-parse", "HEAD")
    result = ingest_openapi(repo.root, ["s.json"])
    assert result.versions == 2
    assert [(e.commit, e.added) for e in result.events[1:]] == [(merge[:10], ("side2",))]


def test_since_and_until_bound_the_walk(tmp_path):
    repo = Repo(tmp_path / "r")
    first = repo.commit({"s.json": ops("a")})
    second = repo.commit({"s.json": ops("a", "b")})
    third = repo.commit({"s.json": ops("a", "b", "c")})
    repo.commit({"s.json": ops("a", "b", "c", "d")})
    result = ingest_openapi(repo.root, ["s.json"], since=first, until=third)
    assert [(e.seq, e.commit, e.change) for e in result.events] == [
        (0, second[:10], ("initial",)),
        (1, third[:10], ("param_added",)),
    ]
    with pytest.raises(IngestError, match="expected a commit 'nope'"):
        ingest_openapi(repo.root, ["s.json"], since="nope")


def test_version_from_tag_is_the_earliest_tag_containing_the_commit(tmp_path):
    repo = Repo(tmp_path / "r")
    repo.commit({"s.json": ops("a")})
    repo.commit({"s.json": ops("a", "b")})
    repo.git("tag", "1.1.0")
    repo.git("tag", "-a", "1.2.0", "-m", "later annotated tag on the same commit", date="1700000000 +0000")
    repo.commit({"s.json": ops("a", "b", "c")})
    repo.commit({"x.txt": "y"})
    repo.git("tag", "-a", "1.3.0", "-m", "release", date="1710000000 +0000")
    repo.commit({"s.json": ops("a", "b", "c", "d")})
    result = ingest_openapi(repo.root, ["s.json"], version_from="tag")
    assert [(e.seq, e.version) for e in result.events] == [(0, "1.1.0"), (1, "1.1.0"), (2, "1.3.0"), (3, UNRELEASED)]


def test_files_per_product_with_hosts_and_the_first_file_wins_a_shared_key(tmp_path):
    repo = Repo(tmp_path / "r")

    def product(host: str, *names: str, op_id: str = "Op") -> dict[str, Any]:
        item = {
            "servers": [{"url": f"https://{host}"}],
            "post": {"operationId": op_id, "parameters": [query(n) for n in names]},
        }
        return spec({"/v1/Things/{Sid}": item})

    repo.commit(
        {
            "spec/json/twilio_api.json": product("api.twilio.com", "a"),
            "spec/json/twilio_chat.json": product("chat.twilio.com", "b"),
        }
    )
    # a rename keeps the keys (host + path): no event
    repo.commit({"spec/json/twilio_api.json": None, "spec/json/twilio_api_v2010.json": product("api.twilio.com", "a")})
    # a second file declaring the same host, method and path: the first file in name order wins
    repo.commit(
        {
            "spec/json/twilio_zz_copy.json": product("chat.twilio.com", "zzz", op_id="Copy"),
            "spec/json/other.yaml": "not: [matched",
        }
    )
    repo.commit({"spec/json/twilio_chat.json": None})  # now the copy is the only one declaring it
    repo.commit({"spec/json/twilio_zz_copy.json": None})  # the product's file deleted: a sunset
    result = ingest_openapi(repo.root, ["spec/json/twilio_*.json"], with_host=True)
    assert [(e.seq, e.api, e.change) for e in result.events] == [
        (0, "POST api.twilio.com/v1/Things/{Sid}", ("initial",)),
        (0, "POST chat.twilio.com/v1/Things/{Sid}", ("initial",)),
        (3, "POST chat.twilio.com/v1/Things/{Sid}", ("param_added", "param_removed")),
        (4, "POST chat.twilio.com/v1/Things/{Sid}", ("endpoint_removed",)),
    ]
    assert result.events[2].operation_id == "Copy" and result.events[2].added == ("zzz",)


def test_fallback_file_where_the_first_is_absent_and_yaml_input(tmp_path):
    repo = Repo(tmp_path / "r")
    yaml_text = YAML_SPEC
    repo.commit({"openapi/spec3.yaml": yaml_text})
    repo.commit({"openapi/spec3.json": ops("a", "b", version="2018-02-05")})
    repo.commit({"openapi/spec3.yaml": yaml_text.replace("- {name: a", "- {name: z")})  # YAML only: not read now
    repo.commit({"openapi/spec3.json": None, "openapi/spec3.yaml": yaml_text})  # back to the YAML
    repo.commit({"README.md": "x"})
    result = ingest_openapi(repo.root, ["openapi/spec3.json|openapi/spec3.yaml"])
    assert [(e.seq, e.version, e.change) for e in result.events] == [
        (0, "2017-08-15", ("initial",)),
        (1, "2018-02-05", ("param_added",)),
        (2, "2017-08-15", ("param_removed",)),
    ]
    assert result.events[2].reverted_after_days is None


def test_a_committer_date_going_back_takes_the_previous_date(tmp_path):
    repo = Repo(tmp_path / "r")
    repo.commit({"s.json": ops("a")})
    repo.commit({"s.json": ops("a", "b")}, days=-0.5)  # e.g. a rebased commit
    result = ingest_openapi(repo.root, ["s.json"])
    assert result.dates_clamped == 1
    assert [e.date for e in result.events] == ["2021-01-02T00:00:00Z", "2021-01-02T00:00:00Z"]


def test_commits_without_any_spec_file_are_skipped(tmp_path):
    repo = Repo(tmp_path / "r")
    repo.commit({"s.json": ops("a")})
    repo.commit({"s.json": None})
    repo.commit({"s.json": ops("a", "b")})
    result = ingest_openapi(repo.root, ["s.json"])
    assert result.commits_without_spec == 1 and result.versions == 2
    assert [e.change for e in result.events] == [("initial",), ("param_added",)]


def test_malformed_spec_names_file_and_commit_unless_skipped(tmp_path):
    repo = Repo(tmp_path / "r")
    repo.commit({"s.json": ops("a")})
    bad = repo.commit({"s.json": '{"openapi": "3.0.0", "paths": {'})
    repo.commit({"s.json": ops("a", "b")})
    with pytest.raises(
        IngestError, match=rf"^s\.json at commit {bad[:12]}: expected JSON, got a syntax error at line 1"
    ):
        ingest_openapi(repo.root, ["s.json"])
    result = ingest_openapi(repo.root, ["s.json"], skip_invalid=True)
    assert result.versions == 2 and len(result.skipped_invalid) == 1 and bad[:12] in result.skipped_invalid[0]
    assert [(e.seq, e.change) for e in result.events] == [(0, ("initial",)), (1, ("param_added",))]


def test_missing_info_version_is_an_error_only_when_it_is_the_label(tmp_path):
    repo = Repo(tmp_path / "r")
    doc = ops("a")
    del doc["info"]["version"]
    repo.commit({"s.json": doc})
    with pytest.raises(
        IngestError, match=r"s\.json at commit \w+: expected info\.version \(or use --version-from tag\)"
    ):
        ingest_openapi(repo.root, ["s.json"])
    assert ingest_openapi(repo.root, ["s.json"], version_from="tag").events[0].version == UNRELEASED


def test_replaying_the_log_reproduces_the_last_parsed_version(tmp_path):
    repo = Repo(tmp_path / "r")
    deprecated = edit(BASE, lambda op: op.update(deprecated=True))
    versions = [
        BASE,
        deprecated,
        spec(
            {
                "/v1/a/{acct}": deprecated["paths"]["/v1/a/{id}"],
                "/v1/b": {"get": {"parameters": [query("q", required=True)]}},
            }
        ),
        spec({"/v1/b": {"get": {"parameters": [query("q")]}, "delete": {}}}),
        spec({"/v1/b": {"get": {}}, "/v1/a/{x}": {"post": {"requestBody": body({"n": S}, ["n"])}}}),
    ]
    for doc in versions:
        repo.commit({"s.json": doc})
    result = ingest_openapi(repo.root, ["s.json"])
    assert top_level(replay_events(result.events)) == top_level(states(versions[-1]))
    kinds = {c for e in result.events for c in e.change}
    assert {"endpoint_added", "endpoint_removed", "deprecated", "path_param_renamed", "required_removed"} <= kinds


def test_spec_sources_and_glob_matching():
    assert SpecSource.parse("./a.json | a.yaml").alternatives == ("a.json", "a.yaml")
    with pytest.raises(ValueError, match="expected FILE_OR_GLOB"):
        SpecSource.parse("a.json|")
    with pytest.raises(ValueError, match="relative to the repository root"):
        SpecSource.parse("/abs/a.json")
    assert path_matches("spec/json/twilio_*.json", "spec/json/twilio_api_v2010.json")
    assert not path_matches("spec/*.json", "spec/json/twilio_api.json")  # '*' stays within a folder
    source = SpecSource.parse("x/*.json|x/*.yaml")
    assert source.select({"x/b.json": "2", "x/a.json": "1", "x/a.yaml": "3"}) == (("x/a.json", "1"), ("x/b.json", "2"))
    assert source.select({"x/a.yaml": "3"}) == (("x/a.yaml", "3"),)


# --- the command line -------------------------------------------------------------------------


def test_cli_writes_a_valid_log_refuses_to_overwrite_and_leaves_nothing_on_error(tmp_path, capsys):
    repo = Repo(tmp_path / "r")
    repo.commit({"s.json": ops("a", "b")})
    repo.commit({"s.json": ops("a")})
    repo.commit({"s.json": ops("a", "b")}, days=3)
    out = tmp_path / "out" / "events.jsonl"
    argv = ["ingest", "openapi", "--repo", str(repo.root), "--spec", "s.json", "--out", str(out), "--quiet"]
    assert main(argv) == 0
    events = read_events(out)
    assert [e.change for e in events] == [("initial",), ("param_removed",), ("param_added",)]
    assert events[1].reverted_after_days == 3.0
    printed = capsys.readouterr().out
    assert "3 spec versions walked" in printed and "breaking events: 1; reverted within 30 days: 1, ever: 1" in printed

    before = out.read_bytes()
    with one_line_error(capsys, "already exists; pass --force"):
        assert 2 == main(argv)
    repo.commit({"s.json": "{not json"})
    with one_line_error(capsys, r"wpb ingest openapi: error: s\.json at commit \w+: expected JSON"):
        assert 2 == main(argv + ["--force"])
    assert out.read_bytes() == before  # the failed run left the old log whole
    fresh = tmp_path / "fresh.jsonl"
    with one_line_error(capsys):
        assert 2 == main(
            ["ingest", "openapi", "--repo", str(repo.root), "--spec", "s.json", "--out", str(fresh), "--quiet"]
        )
    assert not fresh.exists() and list(tmp_path.glob(".fresh.jsonl*")) == []
    assert main(argv + ["--force", "--skip-invalid"]) == 0
    assert "note: skipped unreadable version" in capsys.readouterr().err


def test_cli_rejects_a_folder_that_is_no_repository(tmp_path, capsys):
    with one_line_error(capsys, "expected a git repository"):
        assert 2 == main(
            ["ingest", "openapi", "--repo", str(tmp_path), "--spec", "s.json", "--out", str(tmp_path / "o.jsonl")]
        )


@contextlib.contextmanager
def one_line_error(capsys, pattern: str = ""):
    """The ``wpb`` call inside (``assert 2 == main(...)``) prints one line matching ``pattern``."""
    capsys.readouterr()
    yield
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and re.search(pattern, err), err


def _deep_spec(levels: int) -> str:
    """A spec with an array schema nested ``levels`` deep beside its paths (as text: too deep
    for json.dumps)."""
    deep = '{"type":"array","items":' * levels + '{"type":"string"}' + "}" * levels
    return json.dumps(ops("a", extra="@")).replace('"@"', deep)


def test_a_yaml_spec_of_aliases_of_aliases_is_one_line_at_once_not_hours_of_walking(tmp_path, capsys):
    """Ten aliases of ten aliases..., nine levels (644 bytes), hold a billion values written out:
    the nesting check walked each (108 s here; a tenth level, hours). A self-holding alias too."""
    import time

    laughs = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    laughs += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 10)]
    bomb = 'openapi: "3.0.0"\ninfo: {title: t, version: "1"}\nx-laughs:\n' + "".join(f"  {x}\n" for x in laughs)
    bomb += 'paths:\n  /a:\n    get: {responses: {"200": {description: ok}}}\n'
    loop = 'openapi: "3.0.0"\ninfo: {title: t, version: "1"}\nx-loop: &loop [*loop]\npaths: {}\n'
    for content, named in ((bomb, r"its aliases expand to more than 100,000 values"), (loop, "levels deep")):
        repo = Repo(tmp_path / f"r{len(content)}")
        repo.commit({"s.yaml": content})
        out = tmp_path / "o.jsonl"
        started = time.monotonic()
        with one_line_error(capsys, rf"wpb ingest openapi: error: s\.yaml at commit \w+: .*{named}"):
            assert 2 == main(["ingest", "openapi", "--repo", str(repo.root), "--spec", "s.yaml", "--out", str(out),
                              "--quiet"])
        assert time.monotonic() - started < 30 and not out.exists()


def test_a_spec_of_refs_to_ten_refs_to_ten_refs_is_read_at_once(tmp_path, capsys):
    """Schemas whose allOf holds ten $refs to the next, eight deep (3 KB of JSON), expanded each
    ref at each place: 10^8 merges, more than 120 s and 1.6 GB before it was stopped. The same
    schema merged again adds nothing; the param it declares is found."""
    import time

    schemas = {f"s{i}": {"allOf": [{"$ref": f"#/components/schemas/s{i + 1}"}] * 10} for i in range(8)}
    schemas["s8"] = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    operation = {"operationId": "PostA", "responses": {"200": {"description": "ok"}},
                 "requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/s0"}}}}}
    repo = Repo(tmp_path / "r")
    repo.commit({"s.json": json.dumps(spec({"/a": {"post": operation}}, components={"schemas": schemas}))})
    out = tmp_path / "o.jsonl"
    started = time.monotonic()
    assert 0 == main(["ingest", "openapi", "--repo", str(repo.root), "--spec", "s.json", "--out", str(out), "--quiet"])
    assert time.monotonic() - started < 30
    (event,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert (event["params"], event["required"]) == (["a"], ["a"])


@pytest.mark.parametrize(
    ("name", "content", "named"),
    [
        ("s.json", _deep_spec(3000), "nested more than 200 levels deep"),
        ("s.json", _deep_spec(500), "nested more than 200 levels deep"),
        ("s.yaml", _deep_spec(500), "nested more than 200 levels deep"),
        ("s.yaml", _deep_spec(3000), "expected YAML"),  # (libyaml's own limit)
        ("s.json", json.dumps(spec(
            {"/v1/a": {"post": {"operationId": "PostA",
                                "requestBody": {"content": {"application/json": {"schema": {"$ref": "#/c/s0"}}}}}}},
            c={f"s{i}": {"$ref": f"#/c/s{i + 1}"} for i in range(3000)} | {"s3000": {"type": "object"}},
        )), r"a schema nests more than 200 schemas deep through \$ref"),
    ],
)
def test_a_spec_nested_thousands_of_levels_deep_is_one_line_naming_the_file_and_the_limit(
    tmp_path, capsys, name, content, named
):
    """A spec 3,000 levels deep (or a chain of 3,000 $refs) used to end wpb ingest openapi in a
    raw RecursionError."""
    repo = Repo(tmp_path / "r")
    repo.commit({name: content})
    out = tmp_path / "o.jsonl"
    with one_line_error(capsys, rf"wpb ingest openapi: error: {re.escape(name)} at commit \w+: .*{named}"):
        assert 2 == main(["ingest", "openapi", "--repo", str(repo.root), "--spec", name, "--out", str(out), "--quiet"])
    assert not out.exists()
