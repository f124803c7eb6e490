"""The capability reading of one JavaScript file, in parts (`npm.jsuses` is its entry), each
importing only the ones before it: `found` (the capabilities and what a file's reading
reports), `words` (the scan, and the bytes that settle most places), `windows` (the parse
windows, the kept trees, the budget), `tree` (what is asked of a parsed window), `writes`
(where a write's path points), `calls` (what each word shows where the parser places it).
docs/serving.md "What a release's code can do" tells the story."""
