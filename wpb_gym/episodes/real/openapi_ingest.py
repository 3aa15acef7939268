"""Turn the git history of an OpenAPI description into a change-event log (``wpb ingest openapi``).

The walk follows the apidrift extraction rules: the first-parent history of the spec file(s),
oldest first, every version parsed in full (``openapi_spec``), consecutive versions diffed into
events (``openapi_changes``) and, after the walk, revert times set on the breaking events.

Git is driven through a handful of processes whatever the history's length: ``rev-list`` for the
first-parent commits, one ``diff-tree --stdin`` for the spec files each commit changed (compared
with its first parent, so a merge counts with what it brought to the mainline and a side branch's
own commits are never walked) and one ``cat-file --batch`` for the file contents.

Choices where the history is irregular:

* A ``--spec`` value may list fallbacks, ``openapi/spec3.json|openapi/spec3.yaml``: at each commit
  the first alternative with a file is read. Several ``--spec`` values are read together; when
  two files declare the same endpoint, the first wins (``--spec`` order, then file-name order).
* A commit where no spec file exists at all is not a spec version (the description moved away or
  is not there yet): it is skipped and the next version is compared with the last one read. A
  glob that matches fewer files than before does remove their endpoints (a product's file
  deleted is a sunset).
* A commit that changes only files not read (say the YAML while the JSON is present) is not a
  spec version either. Every spec version consumes a ``seq`` number, even when its changes emit
  no event (prose or response-only edits), as in the reference logs.
* A version that cannot be read (malformed JSON/YAML, not OpenAPI 3, a dangling ``$ref``) stops
  the walk with an ``IngestError`` naming the file and commit, unless ``skip_invalid`` is set:
  then the commit is skipped (no ``seq``) and listed in the result.
* Committer dates can go backwards along a history (rebases, clock skew); a log's dates must not,
  so such a commit takes the previous version's date and is counted in the result.
* ``version_from="tag"`` labels a version with the earliest tag (by tag date) that contains its
  commit; versions after the last tag are labelled ``UNRELEASED``.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from datetime import datetime, timezone
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from .change_events import ChangeEvent
from .openapi_changes import Snapshot, StateTimeline, diff_endpoints, initial_events, with_revert_times
from .openapi_spec import EndpointState, SpecError, endpoint_states, load_document, spec_version_label

#: The version label of commits no tag contains yet (``version_from="tag"``).
UNRELEASED = "UNRELEASED"

VERSION_SOURCES = ("info", "tag")

Progress = Callable[[Iterable, int], Iterable]


class IngestError(ValueError):
    """The history cannot be turned into a log: a git failure or an unreadable spec version."""


@dataclass(frozen=True)
class SpecSource:
    """One ``--spec`` value: a file or glob, with fallbacks tried in order (``a.json|a.yaml``)."""

    alternatives: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> SpecSource:
        alternatives = tuple(_normalise(part) for part in text.split("|"))
        if not all(alternatives):
            raise ValueError(f"expected FILE_OR_GLOB[|FALLBACK...], got {text!r}")
        if any(part.startswith("/") or part.startswith("../") for part in alternatives):
            raise ValueError(f"expected paths relative to the repository root, got {text!r}")
        return cls(alternatives)

    def pathspecs(self) -> list[str]:
        """Git pathspecs for the alternatives (``glob`` magic: ``*`` stays within a folder)."""
        return [f":(glob){pattern}" for pattern in self.alternatives]

    def select(self, tree: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        """``(path, blob)`` of the first alternative with any file in ``tree``, in name order."""
        for pattern in self.alternatives:
            found = tuple(sorted((path, blob) for path, blob in tree.items() if path_matches(pattern, path)))
            if found:
                return found
        return ()


def _normalise(pattern: str) -> str:
    pattern = pattern.strip()
    while pattern.startswith("./"):
        pattern = pattern[2:]
    return pattern


def path_matches(pattern: str, path: str) -> bool:
    """Glob match as git's ``:(glob)`` does it: ``*``, ``?`` and ``[...]`` never cross a ``/``."""
    pattern_parts, path_parts = pattern.split("/"), path.split("/")
    return len(pattern_parts) == len(path_parts) and all(
        fnmatchcase(name, part) for name, part in zip(path_parts, pattern_parts, strict=True)
    )


@dataclass
class IngestResult:
    """The log of one walk, and what the walk passed over."""

    events: list[ChangeEvent]
    versions: int  # spec versions walked (seq numbers used)
    skipped_invalid: list[str] = field(default_factory=list)  # messages of versions skipped as unreadable
    commits_without_spec: int = 0  # commits on the walk where no spec file existed
    dates_clamped: int = 0  # versions whose committer date went back and took the previous one


def ingest_openapi(
    repo: str | Path,
    specs: Sequence[str | SpecSource],
    *,
    since: str | None = None,
    until: str = "HEAD",
    version_from: str = "info",
    with_host: bool = False,
    skip_invalid: bool = False,
    progress: Progress | None = None,
) -> IngestResult:
    """Walk the first-parent history ``since..until`` of the spec files and label every change.

    ``specs`` are files or globs relative to the repository root (see ``SpecSource``);
    ``with_host`` prefixes each path with its server host, for descriptions split over one file
    per product (Twilio). With ``version_from="info"`` a version is labelled with the
    ``info.version`` of the first file read that has one. ``progress(iterable, total)`` may wrap
    the loop over versions.
    """
    if version_from not in VERSION_SOURCES:
        raise ValueError(f"version_from must be one of {VERSION_SOURCES}, got {version_from!r}")
    sources = [s if isinstance(s, SpecSource) else SpecSource.parse(s) for s in specs]
    if not sources:
        raise ValueError("expected at least one spec file or glob")
    git = _Git(Path(repo))
    commits = git.first_parent_commits(since, until)
    versions, without_spec = _spec_versions(git, sources, commits, since)
    tags = git.earliest_tags({c.sha for c, _ in versions}) if version_from == "tag" else {}
    walk = _Walk(with_host=with_host, version_from=version_from, tags=tags)
    result = IngestResult(events=[], versions=0, commits_without_spec=without_spec)
    with git.blob_reader() as read_blob:
        iterator: Iterable = versions if progress is None else progress(versions, len(versions))
        for commit, files in iterator:
            try:
                states, label = walk.read_version(commit, files, read_blob)
            except SpecError as error:
                if not skip_invalid:
                    raise IngestError(str(error)) from None
                result.skipped_invalid.append(str(error))
                continue
            walk.add_version(commit, states, label)
    result.events = with_revert_times(walk.events, walk.timeline)
    result.versions, result.dates_clamped = walk.seq, walk.dates_clamped
    return result


# --- one version after another ----------------------------------------------------------------


@dataclass(frozen=True)
class _Commit:
    sha: str
    parent: str | None  # first parent
    timestamp: int  # committer time, Unix seconds

    @property
    def date(self) -> str:
        return datetime.fromtimestamp(self.timestamp, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Walk:
    """The state carried from version to version: parsed files, last endpoints, events so far."""

    def __init__(self, *, with_host: bool, version_from: str, tags: Mapping[str, str]) -> None:
        self.with_host, self.version_from, self.tags = with_host, version_from, tags
        self.parsed: dict[tuple[str, bool], tuple[dict[str, EndpointState], str | None]] = {}
        self.endpoints: dict[str, EndpointState] = {}
        self.events: list[ChangeEvent] = []
        self.timeline = StateTimeline()
        self.seq = 0
        self.last_date = ""
        self.dates_clamped = 0

    def read_version(
        self, commit: _Commit, files: Sequence[tuple[str, str]], read_blob: Callable[[str, str, str], bytes]
    ) -> tuple[dict[str, EndpointState], str]:
        """The endpoints of one version (first file wins a shared key) and its version label."""
        parsed: dict[tuple[str, bool], tuple[dict[str, EndpointState], str | None]] = {}
        endpoints: dict[str, EndpointState] = {}
        info_version = None
        for path, blob in files:
            # Files unchanged since the last version are not parsed again.
            cache_key = (blob, path.endswith(".json"))
            if cache_key in self.parsed:
                parsed[cache_key] = self.parsed[cache_key]
            elif cache_key not in parsed:
                parsed[cache_key] = self._parse(path, blob, commit.sha, read_blob)
            states, label = parsed[cache_key]
            for key, state in states.items():
                endpoints.setdefault(key, state)
            if info_version is None:
                info_version = label
        if self.version_from == "tag":
            version = self.tags.get(commit.sha, UNRELEASED)
        elif info_version is None:
            raise SpecError(files[0][0], commit.sha, "expected info.version (or use --version-from tag)")
        else:
            version = info_version
        self.parsed = parsed
        return endpoints, version

    def _parse(
        self, path: str, blob: str, commit: str, read_blob: Callable[[str, str, str], bytes]
    ) -> tuple[dict[str, EndpointState], str | None]:
        document = load_document(read_blob(blob, path, commit), path, commit)
        states = endpoint_states(document, path, commit, with_host=self.with_host)
        try:
            label = spec_version_label(document, path, commit)
        except SpecError:
            label = None  # only an error when the label is needed (version_from="info")
        return states, label

    def add_version(self, commit: _Commit, endpoints: dict[str, EndpointState], version: str) -> None:
        """Label the changes since the last version and record the new state."""
        date = commit.date
        if date < self.last_date:
            date, self.dates_clamped = self.last_date, self.dates_clamped + 1
        snapshot = Snapshot(seq=self.seq, commit=commit.sha, date=date, version=version)
        if self.seq == 0:
            self.events += initial_events(endpoints, snapshot)
        else:
            self.events += diff_endpoints(self.endpoints, endpoints, snapshot)
        self.timeline.record(self.seq, date, endpoints)
        self.endpoints, self.last_date, self.seq = endpoints, date, self.seq + 1


def _spec_versions(
    git: _Git, sources: Sequence[SpecSource], commits: Sequence[_Commit], since: str | None
) -> tuple[list[tuple[_Commit, tuple[tuple[str, str], ...]]], int]:
    """The commits that change what is read, each with its ``(path, blob)`` files in reading
    order, and the number of commits skipped because no spec file existed there."""
    pathspecs = [spec for source in sources for spec in source.pathspecs()]
    tree = git.spec_files_at(since, sources) if since else {}
    changes = git.changed_files(commits, pathspecs)
    versions = []
    # With --since, the first version walked is the first one that reads differently from REV.
    last = tuple(item for source in sources for item in source.select(tree))
    without_spec = 0
    for commit in commits:
        if commit.sha not in changes:
            continue
        for path, blob in changes[commit.sha]:
            if blob is None:
                tree.pop(path, None)
            else:
                tree[path] = blob
        files = tuple(item for source in sources for item in source.select(tree))
        if not files:
            without_spec += 1
        elif files != last:
            versions.append((commit, files))
            last = files
    return versions, without_spec


# --- git --------------------------------------------------------------------------------------

_NULL_SHA = {"0" * 40, "0" * 64}


class _Git:
    """The few git commands the walk needs, each failure turned into an ``IngestError``."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        if not repo.is_dir():
            raise IngestError(f"{repo}: no such folder (expected a git clone)")
        self.run("rev-parse", "--git-dir", what="a git repository")

    def run(self, *args: str, input: bytes | None = None, what: str = "") -> bytes:
        try:
            done = subprocess.run(["git", "-C", str(self.repo), *args], input=input, capture_output=True, check=False)
        except FileNotFoundError:
            raise IngestError("git is not installed (or not on PATH)") from None
        if done.returncode != 0:
            message = done.stderr.decode("utf-8", "replace").strip()
            expected = f" (expected {what})" if what else ""
            raise IngestError(f"{self.repo}: git {args[0]} failed{expected}: {message}")
        return done.stdout

    def commit_sha(self, rev: str) -> str:
        out = self.run("rev-parse", "--verify", "--end-of-options", f"{rev}^{{commit}}", what=f"a commit {rev!r}")
        return out.decode().strip()

    def first_parent_commits(self, since: str | None, until: str) -> list[_Commit]:
        """The first-parent chain ``since..until``, oldest first."""
        revs = [self.commit_sha(until)] + ([f"^{self.commit_sha(since)}"] if since else [])
        out = self.run("rev-list", "--first-parent", "--reverse", "--parents", "--timestamp", *revs)
        commits = []
        for line in out.decode().splitlines():
            timestamp, sha, *parents = line.split()
            commits.append(_Commit(sha=sha, parent=parents[0] if parents else None, timestamp=int(timestamp)))
        return commits

    def changed_files(
        self, commits: Sequence[_Commit], pathspecs: Sequence[str]
    ) -> dict[str, list[tuple[str, str | None]]]:
        """Per commit, the spec files it changed against its first parent: ``(path, new blob)``,
        ``None`` for a deletion. One ``diff-tree`` process reads all the commits."""
        pairs = "".join(f"{c.sha} {c.parent}\n" if c.parent else f"{c.sha}\n" for c in commits)
        out = self.run(
            "diff-tree",
            "--stdin",
            "-r",
            "--root",
            "--raw",
            "-z",
            "--no-abbrev",
            "--no-renames",
            "--",
            *pathspecs,
            input=pairs.encode(),
        )
        changes: dict[str, list[tuple[str, str | None]]] = {}
        fields = out.split(b"\0")
        current: list[tuple[str, str | None]] = []
        i = 0
        while i < len(fields):
            token = fields[i].decode("utf-8", "surrogateescape")
            if token.startswith(":"):  # ":old_mode new_mode old_blob new_blob status", then the path
                new_blob = token.split()[3]
                path = fields[i + 1].decode("utf-8", "surrogateescape")
                current.append((path, None if new_blob in _NULL_SHA else new_blob))
                i += 2
                continue
            if token:  # a commit header: the diffs that follow are this commit's
                current = changes.setdefault(token.strip(), [])
            i += 1
        return changes

    def spec_files_at(self, rev: str, sources: Sequence[SpecSource]) -> dict[str, str]:
        """``{path: blob}`` of the files at ``rev`` that any source's alternatives match."""
        out = self.run("ls-tree", "-r", "-z", "--full-tree", self.commit_sha(rev))
        tree = {}
        for entry in out.split(b"\0"):
            if not entry:
                continue
            meta, path = entry.decode("utf-8", "surrogateescape").split("\t", 1)
            _, kind, blob = meta.split()
            if kind == "blob" and any(path_matches(p, path) for s in sources for p in s.alternatives):
                tree[path] = blob
        return tree

    def earliest_tags(self, shas: set[str]) -> dict[str, str]:
        """The earliest tag (by tag date, then name) that contains each commit of ``shas``.

        Tags are visited oldest first; the commits a tag reaches that no earlier tag reaches are
        exactly those whose earliest containing tag it is. One ``rev-list`` per tag.
        """
        out = self.run(
            "for-each-ref",
            "--format=%(creatordate:unix)%09%(refname:strip=2)%09%(objecttype)%09%(*objecttype)%09%(objectname)",
            "refs/tags",
        )
        tags = []
        for line in out.decode().splitlines():
            created, name, kind, peeled_kind, target = line.split("\t")
            if (peeled_kind or kind) == "commit":
                tags.append((int(created or 0), name, target))
        found: dict[str, str] = {}
        earlier: list[str] = []
        for _, name, target in sorted(tags):
            refs = "\n".join([target] + [f"^{t}" for t in earlier]) + "\n"
            reached = self.run("rev-list", "--stdin", input=refs.encode()).decode().split()
            for sha in reached:
                if sha in shas and sha not in found:
                    found[sha] = name
            earlier.append(target)
            if len(found) == len(shas):
                break
        return found

    def blob_reader(self) -> _BlobReader:
        return _BlobReader(self.repo)


class _BlobReader:
    """File contents by blob id from one ``git cat-file --batch`` process (a context manager)."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> Callable[[str, str, str], bytes]:
        self.process = subprocess.Popen(
            ["git", "-C", str(self.repo), "cat-file", "--batch"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        return self.read

    def __exit__(self, *exc: object) -> None:
        assert self.process is not None and self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait()

    def read(self, blob: str, path: str, commit: str) -> bytes:
        """The content of ``blob`` (``path`` and ``commit`` only name it in an error)."""
        assert self.process is not None and self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(blob.encode() + b"\n")
        self.process.stdin.flush()
        header = self.process.stdout.readline().decode().split()
        if len(header) != 3 or header[1] != "blob":
            raise SpecError(path, commit, f"git cannot read blob {blob} ({' '.join(header) or 'no answer'})")
        data = self.process.stdout.read(int(header[2]) + 1)  # the content and a newline
        return data[:-1]
