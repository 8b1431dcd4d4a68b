"""Ray scenarios the tests run in a subprocess (so a hung cluster is bounded by a timeout).

    python -m tests.batch.ray_scenarios kill-actor DIR BASE_URL

`kill-actor`: runs the job in DIR (made by `helpers.write_job`) on 2 actors
with `--rpm 600` against the counting server, kills one actor once 6 rows
are finished (others are then in flight on it), and prints a JSON summary.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from kedi.batch.engine import run_batch
from kedi.batch.inputs import Inputs, job_fingerprint
from kedi.batch.ledger import JobInfo, StoreLedger
from kedi.batch.ray_engine import RayEngine, import_ray
from kedi.batch.worker import BatchSpec


async def kill_actor(folder: Path, base_url: str) -> dict[str, object]:
    program = folder / "label.kedi"
    source = program.read_text()
    inputs = Inputs.open(str(folder / "rows.jsonl"))
    store = str(folder / "history.db")
    ledger = StoreLedger(store)
    program_digest, inputs_digest = job_fingerprint(source, inputs)
    ledger.open_job(
        JobInfo("killed", str(program), program_digest, "rows.jsonl", inputs_digest), force=False
    )
    spec = BatchSpec(
        job="killed",
        program_source=source,
        program_path=str(program),
        store=store,
        adapter="openai",
        model="test-model",
        base_url=base_url,
    )
    engine = RayEngine(spec, address="local", actors=2, rpm=600, tpm=None, parallel=8)
    killed: list[int] = []

    async def killer() -> None:
        while len(ledger.finished("killed", include_failed=True)) < 6:
            await asyncio.sleep(0.02)
        import_ray().kill(engine.actors[0])
        killed.append(1)

    watcher = asyncio.ensure_future(killer())
    summary = await run_batch(
        job="killed",
        rows=list(inputs.rows()),
        total=None,
        ledger=ledger,
        engine=engine,
        out=folder / "results.jsonl",
    )
    watcher.cancel()
    return {
        "killed": bool(killed),
        "ran": summary.counts.ran,
        "failed": summary.counts.failed,
        "ledger": sorted(o.key for o in ledger.outcomes("killed")),
    }


def main() -> None:
    scenario, folder, base_url = sys.argv[1:4]
    assert scenario == "kill-actor"
    print(json.dumps(asyncio.run(kill_actor(Path(folder), base_url))))


if __name__ == "__main__":
    main()
