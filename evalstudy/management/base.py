"""Shared plumbing for the import/export commands: reading files and reporting spec errors."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import CommandError

from evalstudy.models import Study
from evalstudy.spec.errors import SpecInvalid
from evalstudy.spec.load import decode


def read_text(path: str) -> str:
    """The file's text (UTF-8); CommandError naming the file when it cannot be read."""
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise CommandError(f"{path}: cannot read: {error.strerror}") from None
    try:
        return decode(data, path)
    except SpecInvalid as error:
        raise CommandError(str(error)) from None


def spec_errors(error: SpecInvalid) -> CommandError:
    count = len(error.errors)
    return CommandError(
        f"nothing was imported; {count} problem{'s' if count != 1 else ''}:\n{error}"
    )


def get_study(slug: str) -> Study:
    try:
        return Study.objects.get(slug=slug)
    except Study.DoesNotExist:
        raise CommandError(f"no study with slug {slug!r}") from None


def judge_batches_here(run, batches, do_batch, *, out, unit: str) -> None:
    """Run each batch with `do_batch(batch)` in this process (a command's --sync), with a
    progress bar over `run.done` / `run.total` (a BackgroundRun, refreshed after each)."""
    from tqdm import tqdm

    run.refresh_from_db()
    with tqdm(total=run.total, initial=run.done, unit=unit, file=out) as bar:
        for batch in batches:
            do_batch(batch)
            run.refresh_from_db()
            bar.update(run.done - bar.n)


def wait_for_run(run, *, out, unit: str, poll_seconds: float = 1.0) -> None:
    """Follow a BackgroundRun that the workers process until it is done or failed."""
    import time

    from tqdm import tqdm

    finished = (run.Status.DONE, run.Status.FAILED)
    with tqdm(total=run.total, unit=unit, file=out) as bar:
        while run.status not in finished:
            time.sleep(poll_seconds)
            run.refresh_from_db()
            bar.update(run.done - bar.n)
