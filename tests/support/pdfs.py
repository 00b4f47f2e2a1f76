"""Small PDFs the tests write themselves: text pages (Helvetica, real extractable text), a page
holding only an image, encrypted copies (pypdf's writer encrypts), and a "PDF bomb" whose pages
all show one compressed stream of millions of characters."""

from __future__ import annotations

import io
from collections.abc import Sequence

from pypdf import PdfReader, PdfWriter
from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

_FONT = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"
# A 2x2 grey image: a scan without a text layer, as far as extraction can tell.
_IMAGE = (
    b"<< /Type /XObject /Subtype /Image /Width 2 /Height 2 /ColorSpace /DeviceGray "
    b"/BitsPerComponent 8 /Length 4 >>\nstream\n\x00\x80\x80\xff\nendstream"
)


def _literal(text: str) -> bytes:
    escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    return b"(" + escaped.encode("cp1252") + b")"


def _stream(content: bytes) -> bytes:
    return b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream"


def _document(contents: Sequence[bytes], resources: bytes, extra: Sequence[bytes]) -> bytes:
    """A PDF whose page i draws ``contents[i]`` with ``resources``; objects 3.. are ``extra``
    (the resources refer to them), then each page and its content stream."""
    first_page = 3 + len(extra)
    pages = [first_page + 2 * i for i in range(len(contents))]
    kids = b" ".join(b"%d 0 R" % number for number in pages)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % len(pages),
        *extra,
    ]
    for number, content in zip(pages, contents, strict=True):
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources "
            + resources
            + b" /Contents %d 0 R >>" % (number + 1)
        )
        objects.append(_stream(content))
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def text_pdf(pages: Sequence[Sequence[str]]) -> bytes:
    """A PDF with one page per entry, each line of the entry drawn as text."""
    contents = []
    for lines in pages:
        shown = b" T* ".join(_literal(line) + b" Tj" for line in lines)
        contents.append(b"BT /F1 12 Tf 14 TL 72 720 Td " + shown + b" ET")
    return _document(contents, b"<< /Font << /F1 3 0 R >> >>", [_FONT])


def image_pdf(pages: int = 1) -> bytes:
    """A PDF whose pages only draw an image: nothing for text extraction to find."""
    contents = [b"q 200 0 0 200 72 500 cm /Im1 Do Q"] * pages
    return _document(contents, b"<< /XObject << /Im1 3 0 R >> >>", [_IMAGE])


def encrypted(pdf: bytes, *, user_password: str, owner_password: str = "owner") -> bytes:
    """``pdf`` encrypted with AES-256; an empty ``user_password`` lets anyone open it."""
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf)))
    writer.encrypt(user_password=user_password, owner_password=owner_password, algorithm="AES-256")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def bomb_pdf(pages: int, characters: int) -> bytes:
    """A PDF of a few kB whose ``pages`` pages all show one Flate-compressed content stream
    drawing ``characters`` letters: ``pages * characters`` characters of text. pypdf's writer
    merges the identical streams into one object, as an attacker's file would share it."""
    font = DictionaryObject(
        {
            NameObject("/Type"): NameObject("/Font"),
            NameObject("/Subtype"): NameObject("/Type1"),
            NameObject("/BaseFont"): NameObject("/Helvetica"),
        }
    )
    resources = DictionaryObject({NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})})
    content = DecodedStreamObject()
    content.set_data(b"BT /F1 12 Tf 72 720 Td (" + b"A" * characters + b") Tj ET")
    compressed = content.flate_encode(level=9)
    writer = PdfWriter()
    for _ in range(pages):
        page = writer.add_blank_page(612, 792)
        page[NameObject("/Resources")] = resources
        page.replace_contents(compressed)
    writer.compress_identical_objects(remove_duplicates=True)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()
