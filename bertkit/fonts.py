"""A font that has glyphs for every label of a picture (Chinese tokens must not become boxes).

matplotlib's default font (DejaVu Sans) has no CJK glyphs. `font_for(texts)` returns the path of
the first font that covers every character: the default font when it does, else, in this order:

  1. $BERTKIT_FONT (a .ttf / .otf / .ttc path)
  2. fonts shipped by pip packages: noto-cjk-sans-otc (Noto Sans CJK, SIL OFL), mplfonts
  3. fonts from Debian / Ubuntu packages: fonts-noto-cjk, fonts-wqy-microhei, fonts-wqy-zenhei,
     and the usual macOS / Windows CJK fonts
  4. any other font matplotlib has found on the system

When none covers the text it warns (BertkitWarning) saying what to install, and returns None:
the picture is still drawn, with boxes for the missing characters.
"""

from __future__ import annotations

import functools
import glob
import importlib.util
import os
import warnings
from collections.abc import Iterable

from .errors import BertkitWarning

FONT_ENV = "BERTKIT_FONT"
PIP_FONT_PACKAGES = {  # package -> font files inside it (globs)
    "noto_cjk_sans_otc": ("*.ttc", "*.otf"),
    "mplfonts": ("fonts/NotoSansCJK*.otf", "fonts/SourceHan*.otf"),
}
SYSTEM_FONTS = (
    "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",  # Debian fonts-noto-cjk
    "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc",  # Debian fonts-wqy-microhei
    "/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc",  # Debian fonts-wqy-zenhei
    "/usr/share/fonts/opentype/noto/NotoSerifCJK-Regular.ttc",
    "/usr/share/fonts/noto-cjk/NotoSansCJK-Regular.ttc",  # Fedora / Arch
    "/System/Library/Fonts/PingFang.ttc",  # macOS
    "/System/Library/Fonts/STHeiti Light.ttc",
    "C:/Windows/Fonts/msyh.ttc",  # Windows: Microsoft YaHei
    "C:/Windows/Fonts/simhei.ttf",
)
INSTALL_HINT = (
    "pip install noto-cjk-sans-otc (Noto Sans CJK), or apt-get install fonts-noto-cjk "
    "(or fonts-wqy-microhei), or set BERTKIT_FONT=/path/to/a/cjk/font.ttf"
)


def candidates() -> list[str]:
    """Font files to try, best first (see the module docstring)."""
    found = []
    if os.environ.get(FONT_ENV):
        found.append(os.environ[FONT_ENV])
    for package, patterns in PIP_FONT_PACKAGES.items():
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            continue
        for folder in spec.submodule_search_locations:
            for pattern in patterns:
                found += sorted(glob.glob(os.path.join(folder, pattern)))
    found += [p for p in SYSTEM_FONTS if os.path.exists(p)]
    from matplotlib import font_manager

    found += [f.fname for f in font_manager.fontManager.ttflist]
    return found


def default_font() -> str:
    """matplotlib's own default font file (DejaVu Sans): fine for Latin labels."""
    from matplotlib import font_manager

    return font_manager.findfont(font_manager.FontProperties())


@functools.lru_cache(maxsize=64)
def _covers(path: str, chars: str) -> bool:
    from matplotlib.ft2font import FT2Font

    try:
        font = FT2Font(path)
    except (OSError, RuntimeError, ValueError):
        return False
    return all(font.get_char_index(ord(c)) != 0 for c in chars)


def font_for(texts: Iterable[str], *, warn: bool = True) -> str | None:
    """Path of a font with glyphs for every character of `texts`, or None (with a warning)."""
    chars = "".join(sorted({c for t in texts for c in t if not c.isspace()}))
    if not chars:
        return None
    for path in [default_font(), *candidates()]:
        if _covers(path, chars):
            return path
    if warn:
        missing = "".join(c for c in chars if ord(c) > 0x2FF)[:20] or chars[:20]
        warnings.warn(
            f"no installed font has glyphs for all of {missing!r}: those labels will show as boxes; "
            f"to fix, {INSTALL_HINT}",
            BertkitWarning,
            stacklevel=3,
        )
    return None
