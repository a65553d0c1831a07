"""The usage ledger: an SQLite record of what every GPU and GPU process did, kept by
`gputop record` and read by `gputop report` (docs/ledger.md)."""
