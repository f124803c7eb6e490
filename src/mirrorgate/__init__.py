"""mirrorgate: an npm registry proxy that gates every dependency and mirrors what it admits."""

__version__ = "0.1.0"
