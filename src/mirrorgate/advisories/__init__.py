"""OSV advisories for the admission rules: records (`osv`), the compact index (`index`),
reading a zip, a directory or an https URL (`source`), and the feed that keeps the index in
force current in the background (`feed`)."""

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
