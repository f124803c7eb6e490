"""OSV advisories for the admission rules: records (`osv`), the compact index (`index`),
reading a zip, a directory or an https URL (`source`), and the feed that keeps the index in
force current in the background (`feed`)."""

from mirrorgate.advisories.feed import AdvisoryFeed, FeedState
from mirrorgate.advisories.index import AdvisoryIndex, Entry, Hit, IndexBuilder
from mirrorgate.advisories.osv import SEVERITIES, Advisory, parse_record, severity_rank
from mirrorgate.advisories.source import SourceError

__all__ = ["SEVERITIES", "Advisory", "AdvisoryFeed", "AdvisoryIndex", "Entry", "FeedState",
           "Hit", "IndexBuilder", "SourceError", "parse_record", "severity_rank"]
