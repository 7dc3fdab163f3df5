package engine

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/goshmem/goshmem/internal/errs"
)

func TestLoadKeyFromEnv(t *testing.T) {
	k := strings.Repeat("ab", KeySize)
	key, src, err := LoadKey(envOf("GOSHMEM_KEY="+k, "HOME=/nonexistent"))
	if err != nil || src != "GOSHMEM_KEY" || len(key) != KeySize || key[0] != 0xab {
		t.Fatalf("LoadKey = %x, %q, %v", key, src, err)
	}
	for _, bad := range []string{"ab", strings.Repeat("zz", KeySize), strings.Repeat("ab", KeySize+1)} {
		if _, _, err := LoadKey(envOf("GOSHMEM_KEY=" + bad)); !errors.Is(err, errs.Invalid) || strings.Contains(err.Error(), bad) {
			t.Errorf("GOSHMEM_KEY=%q: %v; want errs.Invalid that does not echo the value", bad, err)
		}
	}
	if _, _, err := LoadKey(envOf()); !errors.Is(err, errs.Invalid) || !strings.Contains(err.Error(), "GOSHMEM_KEY") {
		t.Errorf("no key and no HOME: %v", err)
	}
}

func TestKeyFileCreatedOnceUnderRace(t *testing.T) {
	home := t.TempDir()
	const n = 16
	keys := make([][]byte, n)
	errc := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, src, err := LoadKey(envOf("HOME=" + home))
			if err != nil {
				errc <- err
			}
			if src != filepath.Join(home, KeyFileName) {
				t.Errorf("source %q", src)
			}
			keys[i] = k
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	for i := range keys {
		if len(keys[i]) != KeySize || !bytes.Equal(keys[i], keys[0]) {
			t.Fatalf("PE %d got key %x, PE 0 %x: racing PEs must agree", i, keys[i], keys[0])
		}
	}
	fi, err := os.Stat(filepath.Join(home, KeyFileName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
	ents, _ := os.ReadDir(filepath.Join(home, ".goshmem"))
	if len(ents) != 1 {
		t.Fatalf("the key directory holds %d entries, want only the key (no temporary files left)", len(ents))
	}
	// The same key on the next job.
	k, _, err := LoadKey(envOf("HOME=" + home))
	if err != nil || !bytes.Equal(k, keys[0]) {
		t.Fatalf("second load: %x, %v", k, err)
	}
}

func TestKeyFileRefusedWhenOthersCanReadIt(t *testing.T) {
	home := t.TempDir()
	if _, _, err := LoadKey(envOf("HOME=" + home)); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(home, KeyFileName)
	os.Chmod(path, 0o644)
	if _, _, err := LoadKey(envOf("HOME=" + home)); !errors.Is(err, errs.Invalid) || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("mode 0644: %v", err)
	}
	os.Chmod(path, 0o600)
	os.Chmod(filepath.Dir(path), 0o777)
	if _, _, err := LoadKey(envOf("HOME=" + home)); !errors.Is(err, errs.Invalid) {
		t.Fatalf("a directory others can write: %v", err)
	}
	os.Chmod(filepath.Dir(path), 0o700)
	os.WriteFile(path, []byte("not hex\n"), 0o600)
	if _, _, err := LoadKey(envOf("HOME=" + home)); !errors.Is(err, errs.Invalid) {
		t.Fatalf("garbage key: %v", err)
	}
	os.Remove(path)
	os.Symlink("/etc/hostname", path)
	if _, _, err := LoadKey(envOf("HOME=" + home)); err == nil {
		t.Fatal("a symlink was accepted as the key file")
	}
}
