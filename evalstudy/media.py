"""Media stimuli: audio and video files checked, stored and attached to items and outputs.

Every way in (a study spec, an item file, the admin's upload, the API's upload) goes through
`media_prepared`, in three steps:

1. before any transaction, each new file is copied to a private temporary directory from the
   import's `MediaSource` (a zip archive, the media directory or an allowed https URL:
   `evalstudy.media_fetch`) and checked by ffprobe/ffmpeg (`evalstudy.media_probe`), several
   at a time (each check is its own process). Every problem is collected with the file, row
   and field it came from; any problem raises SpecInvalid and nothing is stored;
2. inside the caller's transaction, `PreparedMedia.write` saves each file through Django's
   storage API under a random name (`models.media_file_name`) and writes its row, replacing
   the row it supersedes;
3. if the block raises (a later check, the database), every file saved in step 2 is deleted
   again; files that rows stop pointing to are deleted only once the transaction commits (a
   rollback keeps them). Temporary files are always removed.

A reference is read again only when it changes: re-importing the same spec or item file
fetches and checks nothing. Rows (and files) of items, outputs or systems removed by the
import go with them.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.core.files import File
from django.db import transaction

from .audit import SYSTEM, audit_record
from .media_fetch import MediaSource, MediaSourceError, UrlPolicy, ZipSource, copy_stream
from .media_probe import MediaInfo, MediaRefused, ProbeLimits, probe_file
from .models import AuditEvent, Item, ItemMedia, Output, Study
from .spec.errors import SpecError, SpecInvalid
from .spec.study import ItemSpec

# Checks run at once (each an ffprobe/ffmpeg process, or a download).
PARALLEL_CHECKS = 4


def probe_limits() -> ProbeLimits:
    return ProbeLimits(
        max_bytes=settings.EVALSTUDY_MEDIA_MAX_BYTES,
        max_seconds=settings.EVALSTUDY_MEDIA_MAX_SECONDS,
        timeout_s=settings.EVALSTUDY_MEDIA_PROBE_TIMEOUT,
        ffprobe=settings.EVALSTUDY_FFPROBE, ffmpeg=settings.EVALSTUDY_FFMPEG,
    )


def media_source(*, archive: str | Path | IO[bytes] | None = None,
                 directory: str | Path | None = None, study_slug: str | None = None
                 ) -> MediaSource:
    """Where an import's media references are read from: `archive` (a zip file or stream)
    or `directory`, else the configured EVALSTUDY_MEDIA_IMPORT_ROOT; and the allowed URLs.
    An uploaded archive is read alone (its own files, never the media directory). With
    `study_slug` (an import made by a user through the admin or the API) the media directory
    is that study's own folder, `<EVALSTUDY_MEDIA_IMPORT_ROOT>/<slug>/`: one lab's editors
    cannot import, then listen to, another lab's recordings. SpecInvalid when the archive is
    not a zip file."""
    if directory is not None:
        root: str | Path | None = directory
    elif archive is not None:
        root = None
    else:
        root = settings.EVALSTUDY_MEDIA_IMPORT_ROOT or None
        if root and study_slug:
            root = Path(root) / study_slug
    try:
        zipped = ZipSource(archive) if archive is not None else None
    except MediaSourceError as error:
        raise SpecInvalid([SpecError("media archive", None, "", str(error))]) from None
    return MediaSource(
        directory=Path(root) if root else None, archive=zipped,
        max_bytes=settings.EVALSTUDY_MEDIA_MAX_BYTES,
        urls=UrlPolicy(
            allowed_hosts=frozenset(h.strip().lower() for h in settings.EVALSTUDY_MEDIA_URL_HOSTS
                                    if h.strip()),
            max_bytes=settings.EVALSTUDY_MEDIA_MAX_BYTES,
            timeout_s=settings.EVALSTUDY_MEDIA_FETCH_TIMEOUT,
            allow_loopback=settings.EVALSTUDY_MEDIA_URL_ALLOW_LOOPBACK,
            ca_file=settings.EVALSTUDY_MEDIA_URL_CA_FILE,
        ),
    )


@contextlib.contextmanager
def archive_source(archive: str | Path | IO[bytes] | None) -> Iterator[MediaSource | None]:
    """The MediaSource of an uploaded zip archive (None without one: the defaults), closed
    after the block."""
    if archive is None:
        yield None
        return
    source = media_source(archive=archive)
    try:
        yield source
    finally:
        source.close()


@contextlib.contextmanager
def path_source(path: str | None) -> Iterator[MediaSource | None]:
    """The MediaSource of a command line's --media: a directory, or a zip archive (None
    without one: the defaults). SpecInvalid when it is neither."""
    if not path:
        yield None
        return
    if Path(path).is_dir():
        yield media_source(directory=path)
        return
    if not (path.lower().endswith(".zip") and Path(path).is_file()):
        raise SpecInvalid([SpecError(path, None, "--media", "not a directory or a .zip file")])
    with archive_source(path) as source:
        yield source


@dataclass
class MediaRequest:
    """One file to attach: to item `item` (external id), or to its output of `system`."""

    item: str
    system: str | None
    ref: str  # as written in the file (a path or URL), or an uploaded file's name
    where: SpecError  # file, row and field of the reference, for its errors
    stream: IO[bytes] | None = None  # an uploaded file, read instead of `ref`


@dataclass
class _Checked:
    request: MediaRequest
    path: Path
    info: MediaInfo


@dataclass
class PreparedMedia:
    """Checked files waiting in a temporary directory for `write` (see the module doc)."""

    checked: list[_Checked] = field(default_factory=list)
    keep: set[tuple[str, str | None]] = field(default_factory=set)  # (item, system) kept
    whole: bool = False  # the import describes every media of the study (a spec)
    saved: list[str] = field(default_factory=list)  # stored by `write`, deleted on failure

    def write(self, study: Study) -> int:
        """Store the checked files and their rows; returns how many. Precondition: inside
        the transaction that writes the items (they exist, by external id). With `whole`,
        media the import no longer names are removed."""
        items = dict(Item.objects.filter(study=study).values_list("external_id", "id"))
        outputs = {(item_id, name): pk for pk, item_id, name in Output.objects.filter(
            item__study=study).values_list("id", "item_id", "system__name")}
        if self.whole:
            wanted = self.keep | {(c.request.item, c.request.system) for c in self.checked}
            for row in ItemMedia.objects.filter(item__study=study).select_related(
                    "item", "output__system"):
                key = (row.item.external_id, row.output.system.name if row.output else None)
                if key not in wanted:
                    row.delete()
        for checked in self.checked:
            request, info = checked.request, checked.info
            item_id = items[request.item]
            output_id = outputs[item_id, request.system] if request.system else None
            # output_id=None is Django's IS NULL (an item's own media); the stubs refuse None.
            ItemMedia.objects.filter(  # type: ignore[misc]
                item_id=item_id, output_id=output_id).delete()
            row = ItemMedia(
                item_id=item_id, output_id=output_id, kind=info.kind, mime=info.mime,
                container=info.container, codec=info.codec, duration_s=info.duration_s,
                channels=info.channels, sample_rate=info.sample_rate, width=info.width,
                height=info.height, size_bytes=info.size_bytes, sha256=info.sha256,
                source=request.ref[:1000],
            )
            with open(checked.path, "rb") as stream:
                row.file.save("media", File(stream), save=False)
            self.saved.append(row.file.name)
            row.save()
        # The files of rows deleted above (replaced, or no longer named) go once the
        # transaction commits (media_file_forget); a rollback still needs them.
        return len(self.checked)


def _delete_files(storage: Any, names: list[str]) -> None:
    for name in names:
        with contextlib.suppress(OSError):
            storage.delete(name)


def _check(request: MediaRequest, source: MediaSource | None, folder: Path,
           number: int, limits: ProbeLimits) -> _Checked | SpecError:
    path = folder / f"{number}"
    try:
        if request.stream is not None:
            copy_stream(request.stream, path, limits.max_bytes)
        elif source is None:
            raise MediaSourceError("no media source for this import")
        else:
            source.copy(request.ref, path)
        info = probe_file(path, limits)
    except (MediaSourceError, MediaRefused, OSError) as error:
        if isinstance(error, OSError):  # our temporary copy: say what, not where
            error = MediaSourceError(f"the file could not be copied ({error.strerror})")
        where = request.where
        with contextlib.suppress(OSError):
            path.unlink()
        return SpecError(where.source, where.line, where.path,
                         f"{request.ref}: {error}" if request.stream is None else str(error))
    return _Checked(request, path, info)


@contextlib.contextmanager
def media_checked(requests: list[MediaRequest], *, source: MediaSource | None = None,
                  study: Study | None = None, keep: set[tuple[str, str | None]] | None = None,
                  whole: bool = False) -> Iterator[PreparedMedia]:
    """Check `requests` (SpecInvalid listing every problem: nothing is stored), then yield the
    PreparedMedia for the caller's transaction to `write`; on an exception out of the block,
    delete what `write` saved. `study`: the study written to (its current files are the ones
    a write may orphan)."""
    limits = probe_limits()
    storage = ItemMedia._meta.get_field("file").storage
    prepared = PreparedMedia(keep=keep or set(), whole=whole)
    with tempfile.TemporaryDirectory(prefix="evalstudy-media-") as folder:
        os.chmod(folder, 0o700)
        if requests:
            with ThreadPoolExecutor(max_workers=PARALLEL_CHECKS) as pool:
                results = list(pool.map(
                    lambda pair: _check(pair[1], source, Path(folder), pair[0], limits),
                    enumerate(requests)))
            errors = [result for result in results if isinstance(result, SpecError)]
            if errors:
                raise SpecInvalid(errors)
            prepared.checked = [r for r in results if isinstance(r, _Checked)]
        try:
            yield prepared
        except BaseException:
            _delete_files(storage, prepared.saved)
            raise


def _existing_refs(slug: str) -> dict[tuple[str, str | None], str]:
    return {
        (item, system): ref for item, system, ref in ItemMedia.objects.filter(
            item__study__slug=slug).values_list("item__external_id", "output__system__name",
                                                "source")
    }


@contextlib.contextmanager
def media_prepared(items: list[ItemSpec], *, file_name: str, slug: str, whole: bool,
                   spec_paths: bool, source: MediaSource | None = None,
                   per_study: bool = False) -> Iterator[PreparedMedia]:
    """The media references of imported items (ItemSpec.media, .output_media), prepared by
    `media_checked`. Only references that differ from what study `slug` holds are read.
    `whole`: the items are the study's whole content (a spec): media they no longer name
    are removed on `write`. `spec_paths`: name fields as a spec's paths (items[3].media),
    else as an item file's columns (media, output_media). Without `source`, the configured
    media directory and allowed URLs (`media_source`; with `per_study`, the study's own
    folder of the media directory)."""
    existing = _existing_refs(slug)
    requests: list[MediaRequest] = []
    keep: set[tuple[str, str | None]] = set()
    for index, item in enumerate(items):
        wanted = [(None, item.media), *sorted(item.output_media.items())]
        for system, ref in wanted:
            if not ref:
                continue
            key = (item.external_id, system)
            if existing.get(key) == ref:
                keep.add(key)
                continue
            if spec_paths:
                path = f"items[{index}].media" if system is None else (
                    f"items[{index}].output_media.{system}")
            else:
                path = "media" if system is None else "output_media"
            line = item.line if system is None else item.media_lines.get(system, item.line)
            requests.append(MediaRequest(item.external_id, system, ref,
                                         SpecError(file_name, line, path, "")))
    opened = source is None and bool(requests)
    if opened:
        source = media_source(study_slug=slug if per_study else None)
    study = Study.objects.filter(slug=slug).first()
    try:
        with media_checked(requests, source=source, study=study, keep=keep,
                           whole=whole) as prepared:
            yield prepared
    finally:
        if opened and source is not None:
            source.close()


def item_media_upload(*, item: Item, upload: IO[bytes], name: str, output: Output | None = None,
                      actor: Any = None, source: str = SYSTEM) -> ItemMedia:
    """Attach an uploaded file (admin, API) to `item`, or to its `output`, replacing what was
    there; checked as imports are. SpecInvalid (nothing stored) when the file is refused or
    the study has raters. Audited as "import"."""
    if output is not None and output.item_id != item.pk:
        raise SpecInvalid([SpecError(name, None, "output", "not an output of this item")])
    request = MediaRequest(item.external_id, output.system.name if output else None,
                           os.path.basename(name)[:200], SpecError(name, None, "file", ""),
                           stream=upload)
    study = item.study
    with media_checked([request], study=study) as prepared, transaction.atomic():
        study = Study.objects.select_for_update().get(pk=study.pk)
        _refuse_if_started(study, name)
        prepared.write(study)
        row = ItemMedia.objects.get(item=item, output=output)
        audit_record(actor=actor, source=source, action=AuditEvent.Action.IMPORT, target=item,
                     study=study, changes={"what": "media", "item": item.external_id,
                                           "output": request.system or "",
                                           "file": request.ref, "kind": row.kind,
                                           "duration_s": row.duration_s})
        return row


def item_media_remove(*, media: ItemMedia, actor: Any = None, source: str = SYSTEM) -> None:
    """Remove a media file from its item (its stored file goes once the removal commits).
    SpecInvalid when the study has raters. Audited as "delete"."""
    with transaction.atomic():
        study = Study.objects.select_for_update().get(pk=media.item.study_id)
        _refuse_if_started(study, "media")
        audit_record(actor=actor, source=source, action=AuditEvent.Action.DELETE, target=media,
                     study=study, changes={"what": "media", "item": media.item.external_id,
                                           "file": media.source})
        media.delete()  # its file goes once this commits (media_file_forget)


def _refuse_if_started(study: Study, name: str) -> None:
    from .selectors import study_started

    if study_started(study):
        raise SpecInvalid([SpecError(
            name, None, "", f"study {study.slug!r} is {study.status} and has raters; media "
            "can only change in a draft study (raters would judge a changed stimulus)")])


def media_file_forget(sender: Any, instance: ItemMedia, **_: Any) -> None:
    """post_delete of ItemMedia: its stored file goes once the deletion commits, however the
    row went (an item or study deleted in the admin, a cascade, a removal); a rollback keeps
    it. Connected in evalstudy.apps."""
    name = instance.file.name
    if name:
        storage = instance.file.storage
        transaction.on_commit(lambda: _delete_files(storage, [name]))
