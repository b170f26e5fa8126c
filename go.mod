module github.com/gpuroute/gpuroute

go 1.26.8

require (
	github.com/buger/jsonparser v1.6.1 // indirect
	github.com/prometheus/common v0.73.1 // indirect
	github.com/tetratelabs/proxy-wasm-go-sdk v0.24.0 // indirect
	github.com/tetratelabs/wazero v1.12.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
