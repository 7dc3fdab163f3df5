module github.com/goshmem/goshmem

go 1.26.0

require (
	github.com/hashicorp/go-msgpack/v2 v2.1.5
	github.com/klauspost/cpuid/v2 v2.4.2
	golang.org/x/sys v0.50.0
)
