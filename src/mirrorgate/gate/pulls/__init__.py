"""Who pulled what: `log` (every tarball served and every refusal counted, written off the
request path) and `exposure` (the warning sent once when a version served turns bad). Above
what is kept, which they read; nothing else in the gate reads them.
"""
