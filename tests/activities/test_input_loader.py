"""The input loader against real files: references resolve only inside the operator's roots,
reads are bounded whatever ``stat`` claims, and every refusal reads the same whether the target
is missing or forbidden. (Against a real S3 endpoint: ``test_input_loader_s3.py``.)"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import threading
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.input_loader import (
    MAX_SHOWN_REFERENCE,
    InputLoader,
    _read_fd,
    s3_prefix_allows,
    shown_reference,
)
from aiorch.devstack.processes import free_port
from tests.activities.input_refusals import (
    ERRNO_WORDS,
    LIMIT,
    UNAVAILABLE,
    WORKER_BOTO,
    refusal,
    s3_loader,
    template,
)
from workflows import errors

# ----------------------------------------------------------------------------------- files


@dataclass
class Tree:
    """An input root with a document in it, and a secret outside it."""

    root: Path
    document: Path
    secret: Path

    def loader(self, max_bytes: int = LIMIT) -> InputLoader:
        return InputLoader(max_bytes=max_bytes, file_roots=[self.root])


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    root = tmp_path / "root"
    (root / "team").mkdir(parents=True)
    document = root / "team" / "doc.txt"
    document.write_text("The quarterly report.")
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.txt"
    secret.write_text("OPENAI_API_KEY=sk-secret")
    return Tree(root, document, secret)


async def test_document_inside_a_root_is_read(tree: Tree) -> None:
    """A regular file under a root loads, also through a symlink that stays inside the root,
    through a percent-encoded path and named on ``localhost``."""
    link = tree.root / "latest.txt"
    link.symlink_to(tree.document)
    loader = tree.loader()
    assert await loader.load(tree.document.as_uri()) == "The quarterly report."
    assert await loader.load(link.as_uri()) == "The quarterly report."
    spaced = tree.root / "team" / "with space.txt"
    spaced.write_text("spaced")
    assert await loader.load(spaced.as_uri()) == "spaced"
    local = f"file://localhost{tree.document.as_posix()}"  # the one host that means this one
    assert await loader.load(local) == "The quarterly report."


async def test_no_roots_refuses_every_file(tree: Tree) -> None:
    """A loader without roots (the production default) reads no file at all."""
    error = await refusal(InputLoader(), tree.document.as_uri())
    assert template(error, tree.document.as_uri()) == UNAVAILABLE


async def test_symlink_escaping_the_root_is_refused(tree: Tree) -> None:
    """A symlink inside the root that points outside it is refused, as is one to a directory
    outside from which a path continues."""
    (tree.root / "escape.txt").symlink_to(tree.secret)
    (tree.root / "outdir").symlink_to(tree.secret.parent, target_is_directory=True)
    loader = tree.loader()
    for reference in (
        (tree.root / "escape.txt").as_uri(),
        (tree.root / "outdir" / "secret.txt").as_uri(),
    ):
        assert template(await refusal(loader, reference), reference) == UNAVAILABLE


async def test_dot_dot_is_refused(tree: Tree) -> None:
    """``..`` segments are refused, plain or percent-encoded, even when they would land inside
    the root again."""
    root = tree.root.as_uri()
    for reference in (
        f"{root}/../outside/secret.txt",
        f"{root}/%2e%2e/outside/secret.txt",
        f"{root}/team/../team/doc.txt",
    ):
        assert template(await refusal(tree.loader(), reference), reference) == UNAVAILABLE


async def test_host_files_are_refused(tree: Tree) -> None:
    """The worker's environment, /etc/passwd and /dev/zero are refused at once with the same
    text, without reading them (a read of /dev/zero would say "larger than the limit")."""
    for reference in ("file:///proc/self/environ", "file:///etc/passwd", "file:///dev/zero"):
        error = await refusal(tree.loader(), reference)
        assert template(error, reference) == UNAVAILABLE


async def test_kernel_files_are_refused_even_inside_a_root() -> None:
    """An operator root on /dev or /proc still yields nothing: devices are not regular files and
    /proc files, which claim to be, are refused by their file system."""
    loader = InputLoader(max_bytes=LIMIT, file_roots=[Path("/dev"), Path("/proc/self")])
    for reference in ("file:///dev/zero", "file:///dev/null", "file:///proc/self/environ"):
        error = await refusal(loader, reference)
        assert template(error, reference) == UNAVAILABLE


async def test_sysfs_files_are_refused_even_inside_a_root(caplog: pytest.LogCaptureFixture) -> None:
    """A /sys file claims to be a regular file (of 4096 bytes) but holds the kernel's state:
    with an operator root on /sys it is still refused, by its file system."""
    sysfs = Path("/sys/kernel/uevent_seqnum")
    if not sysfs.is_file() or os.stat("/sys").st_dev == os.stat("/").st_dev:
        pytest.skip("/sys is not mounted here")
    loader = InputLoader(max_bytes=LIMIT, file_roots=[Path("/sys/kernel")])
    with caplog.at_level(logging.INFO, logger="activities.input_loader"):
        error = await refusal(loader, sysfs.as_uri())
    assert template(error, sysfs.as_uri()) == UNAVAILABLE
    assert [record.getMessage() for record in caplog.records] == [
        "input refused: not a regular file"
    ]


async def test_a_refusal_inside_an_activity_is_logged_with_the_activity(
    tree: Tree, caplog: pytest.LogCaptureFixture
) -> None:
    """Inside an activity, the refusal's reason goes to the activity's logger, which names the
    workflow and activity it belongs to."""
    reference = (tree.root / "missing.txt").as_uri()
    with (
        caplog.at_level(logging.INFO, logger="temporalio.activity"),
        pytest.raises(ApplicationError),
    ):
        await ActivityEnvironment().run(tree.loader().load, reference)
    [record] = [record for record in caplog.records if record.name == "temporalio.activity"]
    assert record.getMessage().startswith("input refused: cannot open it (")
    assert record.__dict__["temporal_activity"]["activity_id"] == "test"


async def test_fifo_inside_the_root_is_refused_without_blocking(tree: Tree) -> None:
    """A FIFO in the root (no writer) is refused at once instead of waiting for a writer."""
    fifo = tree.root / "pipe.txt"
    os.mkfifo(fifo)
    error = await refusal(tree.loader(), fifo.as_uri())
    assert template(error, fifo.as_uri()) == UNAVAILABLE


async def test_directories_are_refused(tree: Tree) -> None:
    """A directory in the root, and the root itself, are not documents."""
    for reference in ((tree.root / "team").as_uri(), tree.root.as_uri()):
        assert template(await refusal(tree.loader(), reference), reference) == UNAVAILABLE


async def test_other_hosts_and_odd_urls_are_refused(tree: Tree) -> None:
    """Only plain absolute local paths are references: a host, a query or a fragment is refused."""
    path = tree.document.as_posix()
    for reference in (
        f"file://fileserver{path}",
        f"file://{path}?x=1",
        f"file://{path}#top",
        "file://relative/doc.txt",
    ):
        assert template(await refusal(tree.loader(), reference), reference) == UNAVAILABLE


async def test_size_limit_counts_bytes_read(tree: Tree) -> None:
    """A file of exactly the limit loads; one byte more is refused as too large (said only for a
    file inside a root)."""
    at_limit = tree.root / "at.txt"
    at_limit.write_bytes(b"a" * LIMIT)
    under = tree.root / "under.txt"
    under.write_bytes(b"a" * (LIMIT - 1))
    over = tree.root / "over.txt"
    over.write_bytes(b"a" * (LIMIT + 1))
    loader = tree.loader()
    assert len(await loader.load(under.as_uri())) == LIMIT - 1
    assert len(await loader.load(at_limit.as_uri())) == LIMIT
    error = await refusal(loader, over.as_uri())
    assert template(error, over.as_uri()) == (
        f"input <ref> is larger than the limit of {LIMIT} bytes (MAX_INPUT_BYTES)"
    )


async def test_not_utf8_is_named_inside_a_root(tree: Tree) -> None:
    """Bytes that are not UTF-8 are reported as such for a file inside a root."""
    binary = tree.root / "image.bin"
    binary.write_bytes(b"\xff\xfe\x00binary")
    error = await refusal(tree.loader(), binary.as_uri())
    assert template(error, binary.as_uri()) == "input <ref> is not UTF-8 text"


async def test_missing_and_forbidden_read_byte_identical(tree: Tree) -> None:
    """For one reference, the error is byte for byte the same whether the file exists outside
    the roots or does not exist at all; every other refusal has the same text but for the
    reference, and none carries errno text."""
    reference = tree.secret.as_uri()
    loader = tree.loader()
    forbidden = (await refusal(loader, reference)).message
    tree.secret.unlink()
    missing = (await refusal(loader, reference)).message
    assert forbidden == missing

    os.mkfifo(tree.root / "pipe")
    unreadable = tree.root / "locked.txt"
    unreadable.write_text("locked")
    unreadable.chmod(0)  # root reads it anyway; then it is simply a readable file
    others = [
        (tree.root / "missing.txt").as_uri(),
        (tree.root / "pipe").as_uri(),
        (tree.root / "team").as_uri(),
        "file:///etc/passwd",
        "file:///etc/no-such-file",
        "file:///proc/self/environ",
    ]
    if os.geteuid() != 0:
        others.append(unreadable.as_uri())
    for other in others:
        error = await refusal(loader, other)
        assert template(error, other) == UNAVAILABLE
        assert not any(word in template(error, other) for word in ERRNO_WORDS)


async def test_long_and_unprintable_references_are_shortened(tree: Tree) -> None:
    """A huge or control-character reference is shown shortened and printable in the error."""
    long_ref = tree.root.as_uri() + "/\n\x1b[31mevil" + "a" * 10_000
    error = await refusal(tree.loader(), long_ref)
    assert error.message.startswith("input file://")
    assert len(error.message) < MAX_SHOWN_REFERENCE + 60
    assert "..." in error.message and "\n" not in error.message and "\x1b" not in error.message


async def test_directory_swapped_for_a_symlink_after_the_check_is_refused(tree: Tree) -> None:
    """The open walks the checked path one component at a time without following links, so a
    directory replaced by a link after ``realpath`` (the race) cannot lead out of the root."""
    team = tree.root / "team"
    loader = tree.loader()
    team.rename(tree.root / "moved")
    team.symlink_to(tree.secret.parent, target_is_directory=True)
    reference = (team / "secret.txt").as_uri()
    # What the walk would meet if the swap happened between realpath and open.
    with pytest.raises(ApplicationError) as info:
        loader._read_under(reference, str(tree.root.resolve()), ["team", "secret.txt"])
    assert template(info.value, reference) == UNAVAILABLE


async def test_s3_unreachable_is_retryable() -> None:
    """A connection failure is a passing problem: a retryable InputFetchFailed, so the
    activity's retry policy tries again, never the permanent refusal."""
    port = free_port()  # nothing listens here
    client = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    ).client("s3", endpoint_url=f"http://127.0.0.1:{port}", config=WORKER_BOTO)
    with pytest.raises(ApplicationError) as info:
        await s3_loader(client).load("s3://docs/public/a.txt")
    assert info.value.type == errors.INPUT_FETCH_FAILED
    assert not info.value.non_retryable
    assert info.value.message == (
        "input s3://docs/public/a.txt could not be fetched (EndpointConnectionError); "
        "it will be retried"
    )


async def test_s3_reference_without_s3_configured_says_what_to_set() -> None:
    """An allowed s3:// reference on a worker without an S3 client is refused for good, with
    the settings to configure named."""
    error = await refusal(s3_loader(None, "docs/public"), "s3://docs/public/a.txt")
    assert error.message == "s3:// references need S3 configured (S3_ENDPOINT_URL/AWS)"


async def test_other_schemes_are_refused(tree: Tree) -> None:
    """Only file:// and s3:// references load: any other scheme (or none) is the same refusal,
    which quotes the reference."""
    for reference in ("https://example.com/doc.txt", "ftp://host/doc.txt", "doc.txt"):
        error = await refusal(tree.loader(), reference)
        assert error.message == f"input {reference} is not available (missing or not allowed)"


async def test_each_refusal_tells_the_operator_why_in_the_worker_log(
    tree: Tree, caplog: pytest.LogCaptureFixture
) -> None:
    """The caller gets one text for every refusal; the worker's log says which rule refused it,
    without the reference (the caller's text) or errno text."""
    os.mkfifo(tree.root / "pipe")
    reasons = {
        f"file://{tree.document.as_posix()}?x=1": "not a plain absolute file:// path",
        f"file://{tree.root.as_posix()}/../outside/secret.txt": (
            "not a plain absolute file:// path"
        ),
        f"{tree.root.as_uri()}/doc%00.txt": "not a plain absolute file:// path",
        f"{tree.root.as_uri()}/\ud800.txt": "cannot resolve the path",  # no file name encodes it
        "file:///etc/passwd": "outside INPUT_FILE_ROOTS/CLAIM_CHECK_DIR",
        (tree.root / "missing.txt").as_uri(): "cannot open it",
        (tree.root / "pipe").as_uri(): "not a regular file",
        (tree.root / "team").as_uri(): "not a regular file",
    }
    loader = tree.loader()
    for reference, reason in reasons.items():
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="activities.input_loader"):
            assert template(await refusal(loader, reference), reference) == UNAVAILABLE
        assert [record.getMessage() for record in caplog.records] == [f"input refused: {reason}"]


async def test_a_document_longer_than_one_read_arrives_whole(tree: Tree) -> None:
    """A file read in several chunks (2.5 MiB here) arrives byte for byte, in order."""
    content = bytes(range(256)) * (10 * 1024 + 512)
    big = tree.root / "big.bin"
    big.write_bytes(content)
    loader = InputLoader(max_bytes=len(content), file_roots=[tree.root])
    assert await loader.load_bytes(big.as_uri()) == content


def test_a_bounded_read_stops_at_its_limit_and_reads_on_after_a_short_read() -> None:
    """A read takes at most ``limit`` bytes in all, however much more the source holds; after a
    short read (a pipe holding less than asked) it waits for the rest, up to the limit."""
    reader, writer = os.pipe()
    try:
        os.write(writer, b"a" * 100)
        assert _read_fd(reader, 10) == b"a" * 10  # 90 are left in the pipe

        def write_late() -> None:
            os.write(writer, b"b" * 5)
            os.close(writer)

        late = threading.Timer(0.2, write_late)
        late.start()
        # The first read finds the 90, the next waits for one of the late bytes.
        assert _read_fd(reader, 91) == b"a" * 90 + b"b"
        late.join()
    finally:
        os.close(reader)


def test_a_worker_out_of_file_descriptors_retries_rather_than_refuses(tree: Tree) -> None:
    """Opening fails because the worker has no file descriptor left (EMFILE): the worker's own
    passing trouble, so a retryable InputFetchFailed, never the permanent refusal."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    fillers: list[int] = []
    highest = max(int(fd) for fd in os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (highest + 8, hard))
    try:
        with contextlib.suppress(OSError):
            while True:
                fillers.append(os.open(os.devnull, os.O_RDONLY))
        with pytest.raises(ApplicationError) as info:
            tree.loader()._read_under(
                tree.document.as_uri(), str(tree.root.resolve()), ["team", "doc.txt"]
            )
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert info.value.type == errors.INPUT_FETCH_FAILED and not info.value.non_retryable
    assert template(info.value, tree.document.as_uri()) == (
        "input <ref> could not be fetched (the worker is short of resources); it will be retried"
    )


def test_a_reference_is_shown_printable_and_at_most_the_limit_long() -> None:
    """Error text shows a reference with each unprintable character as ``?``; one longer than
    MAX_SHOWN_REFERENCE is cut to exactly that many characters, ending in ``...``."""
    fits = "s3://b/" + "k" * (MAX_SHOWN_REFERENCE - 7)
    assert shown_reference(fits) == fits
    longer = fits + "k"
    assert shown_reference(longer) == longer[: MAX_SHOWN_REFERENCE - 3] + "..."
    assert len(shown_reference("x" * 10_000)) == MAX_SHOWN_REFERENCE
    assert shown_reference("s3://b/a\nb\x1bc") == "s3://b/a?b?c"


def test_an_s3_prefix_is_a_folder() -> None:
    """``bucket/prefix`` covers the keys in that folder (with or without its trailing slash),
    never a sibling that shares the prefix's letters; a bare bucket covers every key."""
    assert s3_prefix_allows("docs/public", "docs", "public/a.txt")
    assert s3_prefix_allows("docs/public/", "docs", "public/a.txt")
    assert not s3_prefix_allows("docs/public", "docs", "public-internal/a.txt")
    assert not s3_prefix_allows("docs/public", "other", "public/a.txt")
    assert s3_prefix_allows("docs", "docs", "anything/at/all.txt")


async def test_each_s3_refusal_tells_the_operator_why_before_any_call(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An S3 reference outside the allowed prefixes, a folder, an empty key or a ``..`` step
    is refused before any S3 call (this loader has no client), with the caller's one text and
    the rule in the worker's log."""
    loader = s3_loader(None, "docs/public")
    reasons = {
        "s3://docs/public/../secret.txt": "not s3://bucket/key",
        "s3://docs/public/": "not s3://bucket/key",
        "s3://docs": "not s3://bucket/key",
        "s3://docs/private/a.txt": "outside INPUT_S3_PREFIXES and the claim-check prefix",
        "s3://docs/public-internal/a.txt": "outside INPUT_S3_PREFIXES and the claim-check prefix",
    }
    for reference, reason in reasons.items():
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="activities.input_loader"):
            assert template(await refusal(loader, reference), reference) == UNAVAILABLE
        assert [record.getMessage() for record in caplog.records] == [f"input refused: {reason}"]
