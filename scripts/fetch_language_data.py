"""Fetch target-language text to develop language adaptation with, into a cache, never the repo.

Sources (each checked against a pinned sha256 before use; a mismatch stops the script):

- Debian 12's LibreOffice help, translated page by page (MPL-2.0; ``apt-get download``):
  ``libreoffice-help-km`` (Khmer), ``-zh-cn`` (Chinese, simplified), ``-ja`` (Japanese). The
  help pages are HTML inside the ``.deb``; every paragraph, heading, list item and table cell
  becomes one line, kept when most of its letters are in the language's script (the rest of the
  pages are untranslated English).
- ``libreoffice-l10n-hi`` (Hindi user-interface strings, MPL-2.0): the translated strings of its
  gettext ``.mo`` catalogues, one per line, kept when most letters are Devanagari.
- ``wordfreq==3.1.1`` (Apache-2.0 code; its word lists CC BY-SA 4.0, built from Wikipedia,
  subtitles, news, books, web text and more, see its README): ``word<TAB>count`` lists, count =
  frequency × 10⁹ rounded, the form ``extend --method merges`` reads as a corpus. The wheel is
  fetched with ``pip download`` and read without installing it.

Output (``$EMBSCOPE_CACHE/langdata`` or ``~/.cache/embscope/langdata``, or ``--out``):
``libreoffice-help-km.txt`` … one text per line (NFC); ``wordfreq-<lang>.tsv``.

Usage::

    python scripts/fetch_language_data.py                     # everything
    python scripts/fetch_language_data.py --only km --wordfreq hi,zh   # wordfreq has no Khmer
    python scripts/fetch_language_data.py --debs DIR          # .deb files fetched earlier

``apt-get download`` needs the package lists (run ``apt-get update`` once).
"""

from __future__ import annotations

import argparse
import glob
import gzip
import html.parser
import io
import json
import re
import subprocess
import sys
import tempfile
import unicodedata
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from embscope.assets import cache_dir, file_sha256  # noqa: E402

VERSION = "4:7.4.7-1+deb12u14"
#: package → (sha256 of the .deb, the script most letters of a kept line are in)
DEBS = {
    "libreoffice-help-km": ("58700c6513c15d78e6dbbfda82b05f45fcb5a8acf0832f3dca50918d71e27f50", ("KHMER",)),
    "libreoffice-help-zh-cn": ("db867cdece4c2f9c7eebe65e519c6cf386fdcf49d6e061db3dffec893b3e1dee", ("CJK",)),
    "libreoffice-help-ja": ("7799ace9bfe0845771ed2499913e7f7e521318cf3727c007672e3b020f8eb7b9",
                            ("CJK", "HIRAGANA", "KATAKANA")),
    "libreoffice-l10n-hi": ("460c561a674450c0d1d7180e80448bd06eda76e7d3334c4343773d67da742d99", ("DEVANAGARI",)),
}
SHORT = {"km": "libreoffice-help-km", "zh-cn": "libreoffice-help-zh-cn", "ja": "libreoffice-help-ja",
         "hi": "libreoffice-l10n-hi"}
WORDFREQ = ("wordfreq==3.1.1", "4b1c6ecffc6198be3396d5cf871c4423ca71c907c231348d352dd54d62b97473")
#: a line is kept when at least this share of its letters is in the package's script
SCRIPT_SHARE = 0.5
_BLOCKS = {"p", "h1", "h2", "h3", "h4", "h5", "h6", "li", "td", "th", "title", "dt", "dd"}


def checked(path: Path, want: str) -> Path:
    got = file_sha256(path)
    if got != want:
        sys.exit(f"{path.name}: sha256 {got}, expected {want}; the pinned file changed, stopping")
    return path


def in_script(line: str, scripts: tuple[str, ...]) -> bool:
    """At least :data:`SCRIPT_SHARE` of the line's letters are in ``scripts`` (Unicode name prefixes).

    >>> in_script("ភាសា Khmer", ("KHMER",)), in_script("Click OK", ("KHMER",))
    (True, False)
    """
    letters = [c for c in line if unicodedata.category(c)[0] in "LM"]
    if not letters:
        return False
    hits = sum(unicodedata.name(c, "").startswith(scripts) for c in letters)
    return hits >= SCRIPT_SHARE * len(letters)


class _Blocks(html.parser.HTMLParser):
    """Text of the block elements of one help page, one string per block."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.buf: list[str] = []
        self.skip = 0

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style"):
            self.skip += 1
        elif tag in _BLOCKS or tag == "br":
            self.flush()

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self.skip = max(0, self.skip - 1)
        elif tag in _BLOCKS:
            self.flush()

    def handle_data(self, data):
        if not self.skip:
            self.buf.append(data)

    def flush(self):
        text = " ".join("".join(self.buf).split())
        if text:
            self.out.append(text)
        self.buf = []


def help_lines(root: Path, scripts) -> list[str]:
    out: list[str] = []
    for page in sorted(root.rglob("*.html")):
        p = _Blocks()
        p.feed(page.read_text("utf-8", errors="replace"))
        p.flush()
        out += [t for t in p.out if in_script(t, scripts)]
    return out


def mo_lines(root: Path, scripts) -> list[str]:
    import gettext

    out: list[str] = []
    for mo in sorted(root.rglob("*.mo")):
        with mo.open("rb") as f:
            catalog = gettext.GNUTranslations(f)._catalog  # msgid → translated string
        for msgid, text in sorted(catalog.items(), key=lambda kv: str(kv[0])):
            if msgid and isinstance(text, str):
                text = " ".join(text.replace("~", "").split())
                if text and in_script(text, scripts):
                    out.append(text)
    return out


def deb_text(package: str, debs: Path | None, work: Path) -> list[str]:
    want, scripts = DEBS[package]
    found = sorted(glob.glob(str((debs or work) / f"{package}_*.deb")))
    if not found:
        subprocess.run(["apt-get", "download", f"{package}={VERSION}"], cwd=work, check=True)
        found = sorted(glob.glob(str(work / f"{package}_*.deb")))
    deb = checked(Path(found[0]), want)
    tree = work / package
    subprocess.run(["dpkg-deb", "-x", str(deb), str(tree)], check=True)
    lines = help_lines(tree, scripts) if "-help-" in package else mo_lines(tree, scripts)
    seen: set[str] = set()
    return [unicodedata.normalize("NFC", t) for t in lines if not (t in seen or seen.add(t))]


def wordfreq_lists(langs: list[str], work: Path, out: Path) -> None:
    spec, want = WORDFREQ
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(work), spec], check=True)
    wheel = checked(next(work.glob("wordfreq-3.1.1-*.whl")), want)
    import msgpack  # wordfreq's own dependency for its data files

    with zipfile.ZipFile(wheel) as z:
        for lang in langs:
            names = [f"wordfreq/data/{size}_{lang}.msgpack.gz" for size in ("large", "small")]
            name = next((n for n in names if n in z.namelist()), None)
            if name is None:
                print(f"wordfreq 3.1.1 has no list for {lang!r}; skipped")
                continue
            data = msgpack.load(gzip.open(io.BytesIO(z.read(name))), raw=False)
            # wordfreq's cBpack format: a header, then bins of words, bin i at frequency 10^(-i/100)
            lines = []
            for i, words in enumerate(data[1:]):
                count = round(10 ** (-i / 100) * 1e9)
                lines += [f"{unicodedata.normalize('NFC', w)}\t{count}" for w in words if "\t" not in w and count >= 1]
            (out / f"wordfreq-{lang}.tsv").write_text("\n".join(lines) + "\n", "utf-8")
            print(f"wordfreq-{lang}.tsv: {len(lines):,} words")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="folder to write (default: the embscope cache's langdata)")
    ap.add_argument("--only", default=",".join(SHORT), help=f"packages, comma-separated: {', '.join(SHORT)}")
    ap.add_argument("--wordfreq", default="hi,zh,ja", help="wordfreq languages ('' for none)")
    ap.add_argument("--debs", type=Path, help="a folder holding the .deb files already")
    args = ap.parse_args(argv)
    out = args.out or cache_dir("langdata")
    if (Path(__file__).resolve().parents[1] / ".git").exists() and Path(__file__).resolve().parents[1] in out.resolve().parents:
        sys.exit("write the data outside the repository (--out)")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="embscope-langdata-") as tmp:
        work = Path(tmp)
        for short in [s for s in args.only.split(",") if s]:
            lines = deb_text(SHORT[short], args.debs, work)
            path = out / f"{SHORT[short]}.txt"
            path.write_text("\n".join(lines) + "\n", "utf-8")
            print(f"{path.name}: {len(lines):,} lines, {path.stat().st_size:,} bytes")
        if args.wordfreq:
            wordfreq_lists([s for s in args.wordfreq.split(",") if s], work, out)
    (out / "SOURCES.json").write_text(json.dumps({"debian": {p: {"version": VERSION, "sha256": h}
                                                             for p, (h, _) in DEBS.items()},
                                                  "wordfreq": {"spec": WORDFREQ[0], "sha256": WORDFREQ[1]},
                                                  "licence": "MPL-2.0 (LibreOffice help and strings); "
                                                             "CC BY-SA 4.0 (wordfreq lists)"}, indent=1), "utf-8")


if __name__ == "__main__":
    main()
