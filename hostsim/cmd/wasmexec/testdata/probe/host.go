package main

import (
	"strconv"
	"unsafe"
)

// Two proxy-wasm host functions, as a plugin package's test binary imports
// them: the runner answers as a host with nothing in it.

//go:wasmimport env proxy_get_shared_data
func proxyGetSharedData(keyData unsafe.Pointer, keySize uint32, returnValueData, returnValueSize, returnCAS unsafe.Pointer) uint32

//go:wasmimport env proxy_log
func proxyLog(level uint32, messageData unsafe.Pointer, messageSize uint32) uint32

// Results the runner must give (ABI v0.2.1 WasmResult).
const (
	resultOk       = 0
	resultNotFound = 1
)

// checkHost reports what is wrong with the runner's proxy-wasm host
// functions, or "".
func checkHost() string {
	key := []byte("k")
	var data unsafe.Pointer
	var size, cas uint32
	if r := proxyGetSharedData(unsafe.Pointer(&key[0]), uint32(len(key)), unsafe.Pointer(&data), unsafe.Pointer(&size), unsafe.Pointer(&cas)); r != resultNotFound {
		return "proxy_get_shared_data answered " + strconv.Itoa(int(r)) + ", want NotFound"
	}
	if data != nil || size != 0 || cas != 0 {
		return "proxy_get_shared_data wrote to the guest's memory"
	}
	msg := []byte("m")
	if r := proxyLog(2, unsafe.Pointer(&msg[0]), uint32(len(msg))); r != resultOk {
		return "proxy_log answered " + strconv.Itoa(int(r)) + ", want Ok"
	}
	return ""
}
