package engine

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/goshmem/goshmem/internal/errs"
)

// KeySize is the job key's length in bytes (as package boot's).
const KeySize = 32

// KeyFileName is the key file under the user's home directory.
const KeyFileName = ".goshmem/job.key"

// LoadKey returns the job key of a job a foreign engine started:
// GOSHMEM_KEY (64 hex digits) when set, else the user's key file
// ($HOME/.goshmem/job.key), created on first use with a random key.
// The file must be a regular file owned by this user that no one else
// may read or write (mode 0600 or stricter), in a directory only the
// user may write; anything else is an error naming the problem.
//
// Both give the same protection against other users: they cannot
// prove knowledge of the key, so they cannot join a job, impersonate
// its rendezvous or read its traffic's handshake. Neither protects
// against the same user's processes (which can read the file, or the
// environment of a PE through /proc).
func LoadKey(lookup func(string) (string, bool)) (key []byte, source string, err error) {
	if s, ok := lookup("GOSHMEM_KEY"); ok && s != "" {
		key, err := hex.DecodeString(s)
		if err != nil || len(key) != KeySize {
			return nil, "", fmt.Errorf("engine: GOSHMEM_KEY is not %d hex-encoded bytes: %w", KeySize, errs.Invalid)
		}
		return key, "GOSHMEM_KEY", nil
	}
	home, _ := lookup("HOME")
	if home == "" {
		return nil, "", fmt.Errorf("engine: neither GOSHMEM_KEY nor HOME is set: no job key for the rendezvous: %w", errs.Invalid)
	}
	path := filepath.Join(home, KeyFileName)
	key, err = readKeyFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		key, err = createKeyFile(path)
	}
	if err != nil {
		return nil, "", err
	}
	return key, path, nil
}

func readKeyFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("engine: key file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("engine: key file: %w", err)
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("engine: key file %s is not a regular file: %w", path, errs.Invalid)
	case st != nil && int(st.Uid) != os.Geteuid():
		return nil, fmt.Errorf("engine: key file %s is owned by uid %d, not by this user (%d): %w", path, st.Uid, os.Geteuid(), errs.Invalid)
	case fi.Mode().Perm()&0o077 != 0:
		return nil, fmt.Errorf("engine: key file %s has mode %v: others may read or change it (chmod 600 it, or remove it for a new key): %w",
			path, fi.Mode().Perm(), errs.Invalid)
	case fi.Size() > 256:
		return nil, fmt.Errorf("engine: key file %s has %d bytes, want %d hex digits: %w", path, fi.Size(), 2*KeySize, errs.Invalid)
	}
	if err := checkKeyDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	b := make([]byte, 257)
	n, _ := f.Read(b)
	key, err := hex.DecodeString(strings.TrimSpace(string(b[:n])))
	if err != nil || len(key) != KeySize {
		return nil, fmt.Errorf("engine: key file %s does not hold %d hex-encoded bytes: %w", path, KeySize, errs.Invalid)
	}
	return key, nil
}

// checkKeyDir refuses a directory others may write: they could replace
// the key file.
func checkKeyDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("engine: key directory: %w", err)
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || fi.Mode().Perm()&0o022 != 0 || (st != nil && int(st.Uid) != os.Geteuid()) {
		return fmt.Errorf("engine: key directory %s must be a directory of this user that others cannot write (mode %v): %w", dir, fi.Mode().Perm(), errs.Invalid)
	}
	return nil
}

// createKeyFile writes a fresh random key to path, atomically: several
// PEs of one job may race here, and all must end with the same key. The
// first link wins; the others read its file.
func createKeyFile(path string) ([]byte, error) {
	dir := filepath.Dir(path)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("engine: creating the key directory: %w", err)
	}
	if err := checkKeyDir(dir); err != nil {
		return nil, err
	}
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".job.key-*")
	if err != nil {
		return nil, fmt.Errorf("engine: creating the key file: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.WriteString(hex.EncodeToString(key) + "\n")
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return nil, fmt.Errorf("engine: writing the key file: %w", werr)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return readKeyFile(path)
		}
		return nil, fmt.Errorf("engine: creating the key file: %w", err)
	}
	return key, nil
}
