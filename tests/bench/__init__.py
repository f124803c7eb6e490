"""The side-by-side bench's pure parts (bench/): its corpus, its manifest of real samples, the
incident shapes it rebuilds; no network, tarballs made in the test."""
