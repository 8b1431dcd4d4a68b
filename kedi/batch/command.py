"""`kedi batch run` from options to a finished run: job, ledger, limiter, engine."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from kedi.batch.engine import Engine, LocalEngine, Summary, run_batch
from kedi.batch.inputs import Inputs, Row, check_fields, default_job_name, job_fingerprint
from kedi.batch.ledger import JobInfo, StoreLedger, store_location
from kedi.batch.limits import RateLimiter
from kedi.batch.progress import Counts, Progress
from kedi.batch.worker import BatchSpec
from kedi.errors import KediUsageError
from kedi.runtime.program import compile_program


@dataclass
class BatchCommand:
    """One `kedi batch run`, checked and ready to execute."""

    job: str
    spec: BatchSpec
    rows: list[Row]
    ledger: StoreLedger
    out: Path
    options: dict[str, Any]

    @classmethod
    def prepare(
        cls,
        program: str,
        inputs: str,
        out: Path,
        *,
        input_format: str | None,
        reads: Callable[[str], Mapping[str, int]] | None = None,
        **options: Any,
    ) -> BatchCommand:
        """Read and check everything before any row runs (a bad row fails here, with its line).

        `reads` gives the fields a program's source reads (name -> line); no row
        having one of them is an error before anything is recorded.
        """
        try:
            source = Path(program).read_text(encoding="utf-8")
        except OSError as error:
            raise KediUsageError(f"cannot read the program {program}: {error.strerror}") from None
        compile_program(source, path=program)  # syntax and check errors before anything is recorded
        data = Inputs.open(inputs, input_format)
        rows = list(data.rows(options["id_field"]))
        fields_read = reads(source) if reads is not None else {}
        check_fields(rows, fields_read, program, data.label)
        program_digest, inputs_digest = job_fingerprint(source, data)
        job = options["job"] or default_job_name(program, program_digest, inputs_digest)
        location = store_location()
        ledger = StoreLedger(location)
        ledger.open_job(
            JobInfo(job, program, program_digest, data.label, inputs_digest), force=options["force"]
        )
        spec = BatchSpec(
            job=job,
            program_source=source,
            program_path=program,
            store=location,
            adapter=options["adapter"],
            model=options["model"],
            base_url=options["base_url"],
            fields_read=tuple(fields_read.items()),
        )
        return cls(job, spec, rows, ledger, out, options)

    def engine(self, limiter: RateLimiter) -> Engine:
        if self.options["engine"] == "ray":
            from kedi.batch.ray_engine import RayEngine

            return RayEngine(
                self.spec,
                address=self.options["address"],
                actors=self.options["actors"],
                rpm=self.options["rpm"],
                tpm=self.options["tpm"],
                parallel=self.options["parallel"],
            )
        return LocalEngine(self.spec, limiter)

    def execute(self) -> Summary:
        """Run the rows the ledger has not finished and write RESULTS."""
        limiter = RateLimiter(
            rpm=self.options["rpm"], tpm=self.options["tpm"], parallel=self.options["parallel"]
        )
        engine = self.engine(limiter)
        progress = Progress(Counts(total=len(self.rows)), quiet=self.options["quiet"])
        try:
            return anyio.run(
                lambda: run_batch(
                    job=self.job,
                    rows=self.rows,
                    total=len(self.rows),
                    ledger=self.ledger,
                    engine=engine,
                    out=self.out,
                    retry_errors=self.options["retry_errors"],
                    max_errors=self.options["max_errors"],
                    progress=progress,
                ),
                backend="asyncio",
            )
        finally:
            self.ledger.close()
