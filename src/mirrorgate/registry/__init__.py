"""The npm registry protocol: names, origins, the upstream HTTP client, packuments, publishing."""
