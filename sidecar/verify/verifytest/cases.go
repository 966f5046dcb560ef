package verifytest

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
)

// CasesEnv names a directory holding cases.json and cases_meta.json (the
// project's provider cases) that tests use instead of the default places.
const CasesEnv = "IC_CASES_DIR"

// CasesDir returns the directory of the provider cases: $IC_CASES_DIR when
// set, else the shared/cases folder beside the checkout, else the copy
// checked in under sidecar/verify/testdata/cases. It fails naming every
// place it looked.
func CasesDir() (string, error) {
	_, self, _, _ := runtime.Caller(0) // …/sidecar/verify/verifytest/cases.go
	verifyDir := filepath.Dir(filepath.Dir(self))
	repo := filepath.Dir(filepath.Dir(verifyDir))
	return FindCasesDir(os.Getenv(CasesEnv),
		filepath.Join(filepath.Dir(repo), "shared", "cases"),
		filepath.Join(verifyDir, "testdata", "cases"))
}

// FindCasesDir returns the first non-empty candidate holding cases.json.
func FindCasesDir(candidates ...string) (string, error) {
	var tried []string
	for _, dir := range candidates {
		if dir == "" {
			continue
		}
		tried = append(tried, dir)
		if st, err := os.Stat(filepath.Join(dir, "cases.json")); err == nil && st.Mode().IsRegular() {
			return dir, nil
		}
	}
	return "", fmt.Errorf("cases.json not found in %q: set %s to the directory holding cases.json", tried, CasesEnv)
}

// StepBody returns the exact body bytes of a case step from its body and
// body_encoding ("utf8" or "base64"), checked against body_sha256 when given.
func StepBody(body, encoding, sha string) ([]byte, error) {
	var b []byte
	switch encoding {
	case "utf8":
		b = []byte(body)
	case "base64":
		var err error
		if b, err = base64.StdEncoding.DecodeString(body); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("body encoding %q needs a generator", encoding)
	}
	if sha != "" {
		sum := sha256.Sum256(b)
		if got := hex.EncodeToString(sum[:]); got != sha {
			return nil, fmt.Errorf("body bytes differ from the case's body_sha256 (%s, want %s)", got, sha)
		}
	}
	return b, nil
}
