"""``wpb ingest openapi``: a change-event log from the git history of an OpenAPI description."""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path
from typing import Any

from ..core.checks import InputError
from ..core.setting_values import input_error, parse_choice, parse_path, parse_text
from ..evaluation.run_folder import check_folder_path
from .settings import CommandSettings, Setting, Settings, switch


def _spec_source(value: Any, where: str) -> Any:
    from ..episodes.real.openapi_ingest import SpecSource

    text = parse_text(value, where)
    try:
        return SpecSource.parse(text)
    except ValueError as error:
        raise input_error(where, str(error)) from None


def _cmd_ingest_openapi(args: Settings) -> int:
    from tqdm import tqdm

    from ..episodes.real.change_events import write_events
    from ..episodes.real.openapi_ingest import IngestError, ingest_openapi

    out = Path(args.out)
    if not out.name.endswith((".jsonl", ".jsonl.gz")):
        raise InputError(f"--out {out}: expected a .jsonl or .jsonl.gz file name for the change-event log")
    if out.is_dir():
        raise InputError(f"--out {out}: is a folder; expected the change-event log to write (.jsonl or .jsonl.gz)")
    check_folder_path(out.parent, f"--out {out}: its folder")
    if out.exists() and not args.force:
        raise InputError(f"{out} already exists; pass --force to replace it")

    def progress(versions, total):
        return tqdm(versions, total=total, desc="spec versions", unit="version", file=sys.stderr, disable=args.quiet)

    try:
        result = ingest_openapi(
            args.repo,
            args.spec,
            since=args.since,
            until=args.until,
            version_from=args.version_from,
            with_host=args.with_host,
            skip_invalid=args.skip_invalid,
            progress=progress,
        )
    except IngestError as error:
        raise InputError(str(error)) from None
    if not result.events:
        specs = ", ".join("|".join(s.alternatives) for s in args.spec)
        raise InputError(f"no commit in the range has a file matching {specs}; nothing written")
    write_events(out, result.events)  # atomic: an interrupted run leaves no partial log
    for message in result.skipped_invalid:
        print(f"note: skipped unreadable version: {message}", file=sys.stderr)
    if result.commits_without_spec:
        print(f"note: {result.commits_without_spec} commit(s) had no spec file and were skipped", file=sys.stderr)
    if result.dates_clamped:
        print(f"note: {result.dates_clamped} version(s) dated before the previous one took its date", file=sys.stderr)
    breaking = [e for e in result.events if e.breaking]
    reverted = [e.reverted_after_days for e in breaking if e.reverted_after_days is not None]
    first, last = result.events[0].date[:10], result.events[-1].date[:10]
    print(f"{result.versions} spec versions walked ({first} .. {last}) -> {len(result.events)} events in {out}")
    print(
        f"breaking events: {len(breaking)}; reverted within 30 days: {sum(d <= 30 for d in reverted)}, "
        f"ever: {len(reverted)}"
    )
    return 0


INGEST_OPENAPI = CommandSettings(
    "wpb ingest openapi",
    (
        Setting("repo", parse_path, "a git clone holding the spec", required=True),
        Setting(
            "spec",
            _spec_source,
            "spec file or glob relative to the repo root (e.g. 'spec/json/twilio_*.json'); 'a.json|a.yaml' reads "
            "a.yaml where a.json is absent; repeat to read several (the first declaring an endpoint wins)",
            many=True,
            repeat=True,
            required=True,
            metavar="FILE_OR_GLOB[|FALLBACK]",
        ),
        Setting("since", parse_text, "walk only the commits after REV", metavar="REV"),
        Setting("until", parse_text, "walk up to and including REV", default="HEAD", metavar="REV"),
        Setting(
            "version_from",
            partial(parse_choice, choices=("info", "tag")),
            "version label: the spec's info.version (info) or the earliest tag containing the commit (tag)",
            default="info",
        ),
        switch("with_host", "prefix paths with the server host (one file per product, Twilio)"),
        switch("skip_invalid", "skip spec versions that cannot be read instead of stopping"),
        Setting("out", parse_path, "the log to write (.jsonl or .jsonl.gz)", required=True, in_config=False),
        switch("force", "replace an existing --out", in_config=False),
        switch("quiet", "no progress bar", in_config=False),
    ),
)


def add_commands(sub: Any) -> None:
    """Add ingest to the ``wpb`` subcommands ``sub``."""
    ingest = sub.add_parser("ingest", help="build a change-event log from a real API's history")
    ingest_sub = ingest.add_subparsers(dest="source", required=True)
    openapi = ingest_sub.add_parser(
        "openapi",
        help="walk the git history of an OpenAPI 3 description into a change-event log",
        description="Walk the first-parent git history of OpenAPI 3 spec file(s), oldest first, and write one "
        "change event per endpoint that changed in each spec version (the apidrift extraction rules).",
    )
    INGEST_OPENAPI.add_to(openapi)
    openapi.set_defaults(func=_cmd_ingest_openapi, prog=openapi.prog, settings=INGEST_OPENAPI)
