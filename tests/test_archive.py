"""benchmarks/archive.py: a bench's raw runs packed into one deterministic archive (the recording machine's
absolute `out` dropped), unpacked without overwriting anything, read without unpacking, and recomputed."""
import importlib.util
import json
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def archive(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("rw_archive", ROOT / "benchmarks" / "archive.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "ROOT", tmp_path)
    monkeypatch.setattr(mod, "RESULTS", tmp_path / "benchmarks" / "results")
    monkeypatch.setattr(mod, "IGNORE", tmp_path / "benchmarks" / "results" / ".gitignore")
    return mod


def _bench(results: Path) -> Path:
    b = results / "mybench"
    for seed in (0, 1):
        run = b / "runs" / "default" / "uniform" / f"seed{seed}"
        run.mkdir(parents=True)
        (run / "config.json").write_text(json.dumps({"out": f"/home/someone/runs/seed{seed}", "seed": seed}))
        (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "tokens": 10 + seed}) + "\n")
    (b / "summary.json").write_text("{}")
    return b


def test_pack_is_deterministic_drops_the_absolute_out_and_unpacks_back(archive, tmp_path):
    b = _bench(archive.RESULTS)
    out = archive.pack(b)
    first = out.read_bytes()
    assert not (b / "runs").exists() and (b / "summary.json").exists()  # the summaries stay files
    assert "/mybench/runs/" in (archive.RESULTS / ".gitignore").read_text()
    rel = "runs/default/uniform/seed1/config.json"
    cfg = json.loads(archive.read_member(b / rel))  # read without unpacking
    assert cfg == {"out": "benchmarks/results/mybench/runs/default/uniform/seed1", "seed": 1}
    with tarfile.open(out) as tar:
        assert all(m.mtime == 0 and m.uid == 0 and m.mode == 0o644 for m in tar.getmembers())
        assert tar.getnames() == sorted(tar.getnames())
    archive.ensure_unpacked(b / "runs" / "default" / "uniform" / "seed0")  # on demand, where it was
    assert json.loads((b / rel).read_text())["seed"] == 1
    out.unlink()
    assert archive.pack(b).read_bytes() == first  # the same runs give the same bytes
    archive.unpack(b)
    (b / rel).write_text("{}")  # a changed file is never overwritten
    with pytest.raises(SystemExit, match="exists with other contents"):
        archive.unpack(b)


def test_unpack_refuses_a_member_outside_the_folder(archive, tmp_path):
    import io

    b = archive.RESULTS / "evil"
    b.mkdir(parents=True)
    with tarfile.open(b / archive.ARCHIVE, "w:xz") as tar:
        info = tarfile.TarInfo("../../escape.txt")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    with pytest.raises(SystemExit, match="not a plain relative file"):
        archive.unpack(b)
    assert not (tmp_path / "benchmarks" / "escape.txt").exists()


def test_recompute_refuses_a_record_that_is_not_a_bench_summary(archive):
    b = _bench(archive.RESULTS)
    archive.pack(b)
    with pytest.raises(SystemExit, match="not a `rollwise bench` record"):
        archive.recompute(b)


@pytest.mark.parametrize("name", ["..", ".", "../results", "mybench/..", ""])
def test_pack_and_unpack_take_only_a_bench_folder_directly_in_results(archive, name):
    """`pack ..` moved every bench's runs into one archive outside results/: refused, nothing moved."""
    b = _bench(archive.RESULTS)
    with pytest.raises(SystemExit, match="a bench is a folder directly in it"):
        archive.main(["pack", name])
    assert (b / "runs" / "default" / "uniform" / "seed0" / "metrics.jsonl").exists()
    assert not list(archive.ROOT.rglob(archive.ARCHIVE))


def _bomb(b: Path, archive, members: list[tuple[str, int]]) -> None:
    b.mkdir(parents=True)
    with tarfile.open(b / archive.ARCHIVE, "w:xz") as tar:
        for name, size in members:
            info = tarfile.TarInfo(name)
            info.size = size
            tar.addfile(info, _Zeros(size))


class _Zeros:
    def __init__(self, n):
        self.n = n

    def read(self, k=-1):
        k = self.n if k < 0 else min(k, self.n)
        self.n -= k
        return bytes(k)


def test_unpack_bounds_the_expansion_before_extracting_anything(archive, monkeypatch):
    b = archive.RESULTS / "bomb"
    _bomb(b, archive, [("runs/a", 3 << 20), ("runs/b", 3 << 20)])  # 6 MiB of zeros in a few KB of xz
    assert (b / archive.ARCHIVE).stat().st_size < 20_000
    monkeypatch.setattr(archive, "MAX_UNPACKED_BYTES", 4 << 20)
    with pytest.raises(SystemExit, match="expands to more than .* GiB; not a record of runs"):
        archive.unpack(b)
    assert not (b / "runs").exists()  # checked before the first member is written
    monkeypatch.setattr(archive, "MAX_UNPACKED_BYTES", 1 << 30)
    monkeypatch.setattr(archive, "MAX_MEMBERS", 1)
    with pytest.raises(SystemExit, match="more than 1 members"):
        archive.unpack(b)
    assert not (b / "runs").exists()


def test_unpack_streams_members_instead_of_reading_them_whole(archive):
    import tracemalloc

    b = archive.RESULTS / "big"
    _bomb(b, archive, [("runs/big.bin", 64 << 20)])
    tracemalloc.start()
    try:
        archive.unpack(b)
        archive.unpack(b)  # the second call compares the file already there, also in chunks
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (b / "runs" / "big.bin").stat().st_size == 64 << 20
    assert peak < 16 << 20, f"peak {peak / 2 ** 20:.1f} MiB while unpacking a 64 MiB member"
