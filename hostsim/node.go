package hostsim

import (
	"errors"
	"os/exec"
	"strconv"
	"strings"
)

// minNodeMajor is the first Node.js whose node:wasi runs WASI preview 1
// modules without a flag (the version option), which hostsim/v8 and
// wasmexec's node.mjs rely on.
const minNodeMajor = 20

// NodeWASI returns the path of a node binary that can run the module under
// V8 with WASI (hostsim/v8/requestpath.mjs, hostsim/cmd/wasmexec/node.mjs),
// or an error saying why there is none; tests skip on it.
func NodeWASI() (string, error) {
	node, err := exec.LookPath("node")
	if err != nil {
		return "", errors.New("hostsim: node not installed")
	}
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		return "", errors.New("hostsim: node --version: " + err.Error())
	}
	if err := checkNodeVersion(strings.TrimSpace(string(out))); err != nil {
		return "", err
	}
	return node, nil
}

// checkNodeVersion reports whether v, as node --version prints it
// ("v20.20.2"), is minNodeMajor or later.
func checkNodeVersion(v string) error {
	major, _, _ := strings.Cut(strings.TrimPrefix(v, "v"), ".")
	n, err := strconv.Atoi(major)
	if err != nil {
		return errors.New("hostsim: node --version printed " + strconv.Quote(v) + ", not vMAJOR.MINOR.PATCH")
	}
	if n < minNodeMajor {
		return errors.New("hostsim: node " + v + " is older than " + strconv.Itoa(minNodeMajor) + ": no WASI preview 1")
	}
	return nil
}
