"""The serve path: the aiohttp application that answers npm clients under `/npm/`.

Packuments are merged, gated and cached; tarballs come from private first, public when admitted.
"""
