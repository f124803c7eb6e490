"""The admission rules: each rule admitting and denying, the rules file and its errors, and the
range matcher checked against the `semver` package npm itself ships."""
