"""The raw runs of each bench record, one compressed archive per bench, unpacked and recomputed on demand.

    python benchmarks/archive.py pack [BENCH ...]        # benchmarks/results/<bench>/runs.tar.xz, runs/ removed
    python benchmarks/archive.py unpack BENCH [--to DIR]  # the runs back where they were (or under DIR)
    python benchmarks/archive.py recompute BENCH         # the bench's report over its runs vs its summary.json
    python benchmarks/archive.py list

A bench is a folder of benchmarks/results; its raw runs are every folder named `runs` inside it (each run's
config.json and metrics.jsonl). The small records (summary.json, report.md, plots, the .md/.json beside
them) stay as files. The archive is deterministic: members in sorted order, mtime 0, owner 0, mode 0644,
so packing the same runs twice gives the same bytes. Packing drops the recording machine's absolute `out`
from every config.json: it becomes the run's folder relative to the repository root, where `unpack` puts
it back. Unpacked runs are ignored by git (benchmarks/results/.gitignore, written by `pack`).

Readers that need a recorded run call `ensure_unpacked(path)` (benchmarks/check_records.py) or
`read_member(path)` (a test: reads the archive without writing anything), so a fresh clone needs no step.
"""
from __future__ import annotations

import argparse
import io
import json
import math
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
ARCHIVE = "runs.tar.xz"
IGNORE = RESULTS / ".gitignore"
# What an archive may expand to, checked from its headers before anything is extracted: the largest record
# (bench2) is 6.4 MB in 368 files, so these bounds refuse only an archive that is not a record of runs
# (a few kilobytes of xz can expand to gigabytes).
MAX_UNPACKED_BYTES = 1 << 30
MAX_MEMBERS = 100_000


def bench_of(path: Path) -> tuple[Path, str]:
    """(the bench folder, the path inside it) of a path under benchmarks/results."""
    rel = Path(path).resolve().relative_to(RESULTS)
    return RESULTS / rel.parts[0], Path(*rel.parts[1:]).as_posix()


def run_folders(bench: Path) -> list[Path]:
    """The `runs` folders of a bench (not nested in one another), sorted."""
    found = sorted(p for p in bench.rglob("runs") if p.is_dir())
    return [p for p in found if not any(q in p.parents for q in found)]


def _config_without_out(data: bytes, run: Path) -> bytes:
    cfg = json.loads(data)
    if isinstance(cfg, dict) and "out" in cfg:
        cfg["out"] = run.relative_to(ROOT).as_posix()  # where `unpack` restores it, not the recording machine's
    return (json.dumps(cfg, indent=2) + "\n").encode()


def pack(bench: Path) -> Path | None:
    """Archive the bench's runs folders into <bench>/runs.tar.xz and remove them. None: nothing to pack."""
    folders = run_folders(bench)
    if not folders:
        return None
    out = bench / ARCHIVE
    if out.exists():
        raise SystemExit(f"archive: {out} exists; unpack it first (its runs would be packed twice)")
    files = sorted(f for d in folders for f in d.rglob("*") if f.is_file() or f.is_symlink())
    if any(f.is_symlink() for f in files):
        raise SystemExit(f"archive: {next(f for f in files if f.is_symlink())} is a link; only plain files are packed")
    tmp = out.with_name(out.name + ".tmp")
    with tarfile.open(tmp, "w:xz", format=tarfile.GNU_FORMAT, preset=9) as tar:
        for f in files:
            data = f.read_bytes()
            if f.name == "config.json":
                data = _config_without_out(data, f.parent)
            info = tarfile.TarInfo(f.relative_to(bench).as_posix())
            info.size, info.mtime, info.mode, info.uid, info.gid, info.uname, info.gname = len(data), 0, 0o644, 0, 0, "", ""
            tar.addfile(info, io.BytesIO(data))
    _check(tmp, bench, files)
    tmp.replace(out)
    for d in folders:
        shutil.rmtree(d)
    _ignore(bench, folders)
    return out


def _check(archive: Path, bench: Path, files: list[Path]) -> None:
    """Every file is in the archive with its bytes (config.json: with `out` made relative) before any is removed."""
    with tarfile.open(archive, "r:xz") as tar:
        names = tar.getnames()
        if names != [f.relative_to(bench).as_posix() for f in files]:
            raise SystemExit(f"archive: {archive} does not list the files packed; nothing removed")
        for f in files:
            got = tar.extractfile(f.relative_to(bench).as_posix()).read()
            want = f.read_bytes()
            if f.name == "config.json":
                want = _config_without_out(want, f.parent)
            if got != want:
                raise SystemExit(f"archive: {f} differs in {archive}; nothing removed")


def _ignore(bench: Path, folders: list[Path]) -> None:
    lines = set(IGNORE.read_text().splitlines()) if IGNORE.exists() else set()
    lines |= {"/" + d.relative_to(RESULTS).as_posix() + "/" for d in folders}
    header = "# raw runs unpacked from <bench>/runs.tar.xz (benchmarks/archive.py): never committed again"
    IGNORE.write_text("\n".join([header] + sorted(lines - {header})) + "\n")


def _bounded_members(tar: tarfile.TarFile, archive: Path) -> list[tarfile.TarInfo]:
    """The archive's members, each a plain relative file, their count and total size within the bounds:
    read from the headers (streamed) before any member is extracted."""
    members, total = [], 0
    for m in tar:  # one header at a time: an archive of a billion members is refused at the bound
        if len(members) >= MAX_MEMBERS:
            raise SystemExit(f"archive: {archive}: more than {MAX_MEMBERS} members; not a record of runs, refusing it")
        members.append(m)
        total += m.size
        if total > MAX_UNPACKED_BYTES:
            raise SystemExit(f"archive: {archive}: expands to more than {MAX_UNPACKED_BYTES / 2 ** 30:g} GiB; "
                             "not a record of runs, refusing it (nothing extracted)")
    return list(_members_checked(members, archive))


def _members_checked(members, archive: Path):
    for m in members:
        p = Path(m.name)
        if not m.isfile() or p.is_absolute() or ".." in p.parts:
            raise SystemExit(f"archive: {archive}: member {m.name!r} is not a plain relative file; refusing it")
        yield m


def _same_bytes(path: Path, src) -> bool:
    """Whether the file holds exactly the stream's bytes, compared in chunks (neither read whole)."""
    with open(path, "rb") as f:
        while True:
            a, b = f.read(1 << 20), src.read(1 << 20)
            if a != b:
                return False
            if not a:
                return True


def unpack(bench: Path, to: Path | None = None) -> Path:
    """Extract <bench>/runs.tar.xz under `to` (default: the bench folder, where the runs were). A file
    already there with the same bytes is kept; one with other bytes is an error naming it (never overwritten).
    The members are checked first (plain relative files; count and expanded size bounded), then streamed
    to disk, never read whole into memory."""
    archive = bench / ARCHIVE
    if not archive.exists():
        raise SystemExit(f"archive: {archive} not found (benches with archives: {', '.join(benches()) or 'none'})")
    dest = bench if to is None else Path(to)
    with tarfile.open(archive, "r:xz") as tar:
        for m in _bounded_members(tar, archive):
            target = dest / m.name
            if target.exists():
                if not _same_bytes(target, tar.extractfile(m)):
                    raise SystemExit(f"archive: {target} exists with other contents; move it away to unpack {archive}")
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with tar.extractfile(m) as src, open(target, "xb") as f:
                shutil.copyfileobj(src, f, 1 << 20)
    return dest


def ensure_unpacked(path: Path) -> Path:
    """A recorded run's folder or file under benchmarks/results, unpacked from its bench's archive if absent."""
    path = Path(path)
    if not path.exists() and RESULTS in path.resolve().parents:  # elsewhere: not a record, nothing to unpack
        bench, _ = bench_of(path)
        if (bench / ARCHIVE).exists():
            unpack(bench)
    return path


def read_member(path: Path) -> bytes:
    """The bytes of a recorded file under benchmarks/results: the file if unpacked, else from the archive."""
    path = Path(path)
    if path.exists():
        return path.read_bytes()
    bench, inner = bench_of(path)
    with tarfile.open(bench / ARCHIVE, "r:xz") as tar:
        return tar.extractfile(inner).read()


def benches() -> list[str]:
    return sorted(p.parent.name for p in RESULTS.glob(f"*/{ARCHIVE}"))


# ---- recompute: the bench's report over the unpacked runs, against its recorded summary ----------------
def _leaves(d, prefix=""):
    if isinstance(d, dict):
        for k, v in d.items():
            yield from _leaves(v, f"{prefix}/{k}" if prefix else str(k))
    elif isinstance(d, list):
        for i, v in enumerate(d):
            yield from _leaves(v, f"{prefix}[{i}]")
    else:
        yield prefix, d


def _same(a, b, rtol: float = 1e-12) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
            return True
        return a == b or abs(a - b) <= rtol * max(abs(a), abs(b))
    return a == b


def _is_bench_summary(rec) -> bool:
    return isinstance(rec, dict) and isinstance(rec.get("mixes"), dict) and "budget_tokens" in rec


def recompute(bench: Path) -> bool:
    """Unpack into a temporary folder, run `rollwise bench`'s report (bench/report.py summarize) over the
    runs with the recorded settings, and compare every figure of each recorded summary.json (the bench's,
    and its arms' where a script ran several benches in subfolders). A bench written by another script
    (no summary with mixes of planners) is refused with what to do instead."""
    summaries = [p for p in sorted(bench.rglob("summary.json")) if _is_bench_summary(json.loads(p.read_text()))]
    if not summaries:
        raise SystemExit(f"recompute: {bench.name} is not a `rollwise bench` record (no summary.json with mixes); "
                         f"its figures come from its own script under benchmarks/ (see {bench.name}'s .md): unpack it "
                         f"with `python benchmarks/archive.py unpack {bench.name}` and rerun that script's report")
    with tempfile.TemporaryDirectory() as tmp:
        unpack(bench, Path(tmp))
        results = [_recompute_one(p, Path(tmp) / p.parent.relative_to(bench), bench) for p in summaries]
    if all(r is None for r in results):
        raise SystemExit(f"recompute: no summary of {bench.name} could be recomputed by rollwise bench's report alone")
    return all(r is not False for r in results)


def _recompute_one(rec_path: Path, runs_root: Path, bench: Path) -> bool | None:
    from rollwise.bench.report import summarize
    from rollwise.bench.runner import BenchConfig

    rec = json.loads(rec_path.read_text())
    name = rec_path.parent.relative_to(RESULTS).as_posix()
    if not (runs_root / "runs").is_dir():
        print(f"SKIPPED {name}: its runs are not in {bench.name}/{ARCHIVE}")
        return None
    mixes = list(rec["mixes"])
    m0 = rec["mixes"][mixes[0]]
    cfg = BenchConfig(out=str(runs_root), planners=list(m0["planners"]), mixes=mixes, seeds=int(rec["seeds"]),
                      seed_start=int(rec.get("seed_start", 0)), budget_tokens=int(rec["budget_tokens"]),
                      pool_size=int(rec["pool_size"]), eval_size=int(rec["eval_size"]), engine=rec["engine"])
    try:
        got = dict(_leaves(summarize(cfg, m0["target_acc"] if m0.get("target_fixed") else None)))
    except ValueError as e:  # an arm compared with a GRPO run recorded elsewhere (generate3_bench.py's arms)
        print(f"SKIPPED {name}: the report cannot run on this folder's runs alone ({e}); its figures come "
              f"from the script that wrote {bench.name}'s .md")
        return None
    ok, compared, missing = True, 0, []
    for key, want in _leaves(rec):
        if key == "command":
            continue
        if key not in got:
            missing.append(key)
            continue
        compared += 1
        if not _same(want, got[key]):
            ok = False
            print(f"DIFFERS {name}: {key}: recorded {want!r}, recomputed {got[key]!r}")
    print(f"{'EQUAL' if ok else 'DIFFERS'} {name}: {compared} recorded figures recomputed from "
          f"{bench.name}/{ARCHIVE}" + (f"; {len(missing)} recorded fields the report no longer writes "
                                       f"(not compared): {', '.join(missing[:6])}{' ...' if len(missing) > 6 else ''}"
                                       if missing else ""))
    return ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack", help="archive benches' runs folders (all benches with runs when none is named)")
    p.add_argument("bench", nargs="*")
    u = sub.add_parser("unpack", help="extract a bench's runs where they were recorded (or under --to)")
    u.add_argument("bench")
    u.add_argument("--to", help="another folder to extract into")
    r = sub.add_parser("recompute", help="recompute a bench's summary from its archived runs and compare")
    r.add_argument("bench")
    sub.add_parser("list", help="benches with an archive")
    args = ap.parse_args(argv)

    def folder(name: str) -> Path:
        b = RESULTS / name
        # a bench is one folder directly in results/: `..` (or a path) would pack every bench's runs elsewhere
        if not name or name in (".", "..") or "/" in name or "\\" in name or not b.is_dir() \
                or b.resolve().parent != RESULTS.resolve():
            raise SystemExit(f"archive: no bench {name!r} in {RESULTS} (a bench is a folder directly in it)")
        return b

    if args.cmd == "pack":
        names = args.bench or sorted(p.name for p in RESULTS.iterdir() if p.is_dir() and run_folders(p))
        for name in names:
            out = pack(folder(name))
            print(f"{name}: {'nothing to pack' if out is None else f'{out.relative_to(ROOT)} ({out.stat().st_size / 1e6:.2f} MB)'}")
    elif args.cmd == "unpack":
        print(unpack(folder(args.bench), Path(args.to) if args.to else None))
    elif args.cmd == "recompute":
        return 0 if recompute(folder(args.bench)) else 1
    else:
        print("\n".join(benches()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
