"""OSV advisories for the admission rules: a compact index, kept current in the background.

`osv` reads one record, `index` holds them by package name, `source` reads a zip, a directory
or an https URL, and `feed` keeps the index in force current.
"""

from mirrorgate.advisories.feed import AdvisoryFeed, FeedState
from mirrorgate.advisories.index import AdvisoryIndex, Hit, IndexBuilder, PackageAdvisory
from mirrorgate.advisories.osv import SEVERITIES, Advisory, parse_record, severity_rank
from mirrorgate.advisories.source import SourceError

__all__ = [
           "SEVERITIES",
           "Advisory",
           "AdvisoryFeed",
           "AdvisoryIndex",
           "FeedState",
           "Hit",
           "IndexBuilder",
           "PackageAdvisory",
           "SourceError",
           "parse_record",
           "severity_rank",
]
