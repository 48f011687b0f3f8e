module github.com/lash-run/lash

go 1.26.8

require (
	github.com/cockroachdb/datadriven v1.0.3
	github.com/vmihailenco/msgpack/v5 v5.4.1
)

require (
	github.com/pmezard/go-difflib v1.0.0 // indirect
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
)
