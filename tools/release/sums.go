package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// sumsFile is the checksums' file name, in the form sha256sum -c reads.
const sumsFile = "SHA256SUMS"

// writeSums writes dir/SHA256SUMS with a line for every other regular file
// in dir, in the name order os.ReadDir gives.
func writeSums(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var lines []string
	for _, e := range entries {
		if !e.Type().IsRegular() || e.Name() == sumsFile {
			continue
		}
		sum, err := fileSum(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		lines = append(lines, sum+"  "+e.Name()+"\n")
	}
	if len(lines) == 0 {
		return fmt.Errorf("%s holds no file to sum", dir)
	}
	return os.WriteFile(filepath.Join(dir, sumsFile), []byte(strings.Join(lines, "")), 0o644) //nolint:gosec // G306: checksums are published
}

func fileSum(path string) (string, error) {
	f, err := os.Open(path) //nolint:gosec // G304: a file of the release directory
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
