"""``dump``'s parent turns the child's compile records (JSON lines) into tree entries, with notes
for what a later ``run`` cannot take by hash."""

from __future__ import annotations

from proton_inject.dump.program import _program_results


def _record(tmp_path, name, hash_, warps, **extra):
    d = tmp_path / "dump" / hash_
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{name}.ttgir").write_text(f"// {warps} warps\ntt.func public @{name}() {{\n}}\n")
    return {"name": name, "hash": hash_, "ttgir_path": str(d / f"{name}.ttgir"), "source_file": "k.py",
            "target": "cuda:90", "num_warps": warps,
            "num_stages": 3, "num_ctas": 1, "signature": {}, "constexprs": {}, "divisibility_16": [],
            "metadata": {}, "fn_key": "0" * 16, **extra}


def test_shared_hash_and_per_process_hash_are_noted(tmp_path):
    records = [_record(tmp_path, "ln", "H1", 4), _record(tmp_path, "ln", "H1", 8),
               _record(tmp_path, "sweep", "H2", 4, per_process_globals=["get_int_t"]),
               _record(tmp_path, "sweep", "H3", 4, per_process_globals=["get_int_t"])]
    results, notes = _program_results(records, None)
    assert sorted((r.kernel_name, r.hash) for r in results) == [("ln", "H1"), ("sweep", "H2"), ("sweep", "H3")]
    (shared,) = [n for n in notes if n.startswith("ln:")]
    assert "share override hash H1" in shared and "its own TTGIR" in shared
    (moving,) = [n for n in notes if n.startswith("sweep:")]  # once per kernel
    assert "changes in every process" in moving and "get_int_t" in moving
