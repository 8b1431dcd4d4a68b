"""Running one program over a dataset: `kedi batch` (see docs/batch.md)."""
