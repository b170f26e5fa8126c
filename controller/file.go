package controller

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"

	"github.com/gpuroute/gpuroute/controller/pool"
)

// File writes the whole plugin configuration (Base with the fleet's
// replica list) to Path, for a proxy that reads a file: the local gateway
// (gpuroute-gateway --plugin-config), which reloads it when it changes.
type File struct {
	Path string
	// Base is the rest of the configuration; nil is {}.
	Base []byte
}

// Publish writes the configuration if it differs from the file's. It
// writes a temporary file beside Path and renames it over Path, so a
// reader never sees half a configuration.
func (f *File) Publish(_ context.Context, rs []pool.Replica) error {
	cfg, err := pool.Merge(f.Base, rs)
	if err != nil {
		return errors.New("controller: " + f.Path + ": " + err.Error())
	}
	if old, err := os.ReadFile(f.Path); err == nil && bytes.Equal(old, cfg) {
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(f.Path), "."+filepath.Base(f.Path)+".*")
	if err != nil {
		return errors.New("controller: " + err.Error())
	}
	_, werr := tmp.Write(cfg)
	merr := tmp.Chmod(0o644) // CreateTemp's 0600 would hide it from a proxy running as another user
	cerr := tmp.Close()
	if err := errors.Join(werr, merr, cerr); err != nil {
		os.Remove(tmp.Name())
		return errors.New("controller: " + err.Error())
	}
	if err := os.Rename(tmp.Name(), f.Path); err != nil {
		os.Remove(tmp.Name())
		return errors.New("controller: " + err.Error())
	}
	return nil
}

// String names the destination in logs.
func (f *File) String() string { return "file " + f.Path }
