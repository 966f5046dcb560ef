package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

// deref returns the value a pointer argument points to, or nil.
func deref(a any) any {
	if a == nil {
		return nil
	}
	v := reflect.ValueOf(a)
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	return v.Interface()
}

var paramRe = regexp.MustCompile(`\$(\d+)`)

// pgbenchScript turns the captured statement into a pgbench script for
// -M prepared: the varying arguments become pgbench variables (the key
// :k drawn by \set before each statement; :src and :tok given with -D),
// the constants -D variables, and NULL and empty-string arguments SQL
// literals (pgbench variables can be neither). items > 1 sends BEGIN,
// items single-row statements and COMMIT in one pipeline.
// It returns the script and the -D definitions of the constants.
func (st *statement) pgbenchScript(items int, keyMax int64) (string, []string, error) {
	var defs []string
	var bad error
	sql := paramRe.ReplaceAllStringFunc(st.sql, func(m string) string {
		n, _ := strconv.Atoi(m[1:])
		i := n - 1
		if i < 0 || i >= len(st.args) {
			bad = fmt.Errorf("statement uses %s but has %d arguments", m, len(st.args))
			return m
		}
		switch i {
		case st.eventArg:
			return ":k"
		case st.sourceArg:
			return ":src"
		case st.tokenArg:
			return ":tok"
		}
		v := deref(st.args[i])
		switch v := v.(type) {
		case nil:
			return "NULL"
		case string:
			if v == "" {
				return "''"
			}
			if strings.ContainsAny(v, " \t\n'\"\\") {
				bad = fmt.Errorf("argument %s %q cannot be a pgbench -D value", m, v)
			}
		}
		name := "p" + m[1:]
		def := name + "=" + formatArg(v)
		if !contains(defs, def) {
			defs = append(defs, def)
		}
		return ":" + name
	})
	if bad != nil {
		return "", nil, bad
	}
	sort.Slice(defs, func(i, j int) bool { return paramNumber(defs[i]) < paramNumber(defs[j]) })
	sql = strings.TrimSpace(sql) + ";\n"
	var b strings.Builder
	setKey := fmt.Sprintf("\\set k random(1, %d)\n", keyMax)
	if items == 1 {
		b.WriteString(setKey)
		b.WriteString(sql)
		return b.String(), defs, nil
	}
	b.WriteString("\\startpipeline\nBEGIN;\n")
	for range items {
		b.WriteString(setKey)
		b.WriteString(sql)
	}
	b.WriteString("COMMIT;\n\\endpipeline\n")
	return b.String(), defs, nil
}

// paramNumber returns N of a "pN=value" definition.
func paramNumber(def string) int {
	name, _, _ := strings.Cut(def, "=")
	n, _ := strconv.Atoi(strings.TrimPrefix(name, "p"))
	return n
}

func formatArg(v any) string {
	switch v := v.(type) {
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case float32:
		return strconv.FormatFloat(float64(v), 'f', -1, 32)
	case time.Duration:
		return strconv.FormatFloat(v.Seconds(), 'f', -1, 64)
	}
	return fmt.Sprint(v)
}

func contains(xs []string, x string) bool {
	for _, s := range xs {
		if s == x {
			return true
		}
	}
	return false
}

var (
	tpsRe    = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)
	failedRe = regexp.MustCompile(`number of failed transactions: (\d+)`)
)

// pgbenchRun runs one pgbench cell and reads its per-transaction log.
type pgbenchRun struct {
	dir, dbURL, label string
	script            string
	defs              []string
	clients           int
	duration          time.Duration
	items             int
}

func (p pgbenchRun) run(ctx context.Context) (result, error) {
	scriptPath := filepath.Join(p.dir, p.label+".sql")
	if err := os.WriteFile(scriptPath, []byte(p.script), 0o600); err != nil {
		return result{}, err
	}
	prefix := filepath.Join(p.dir, "log-"+p.label)
	threads := min(p.clients, runtime.NumCPU())
	args := []string{"-n", "-M", "prepared", "-c", strconv.Itoa(p.clients), "-j", strconv.Itoa(threads),
		"-T", strconv.Itoa(int(p.duration / time.Second)), "-f", scriptPath, "-l", "--log-prefix=" + prefix}
	for _, d := range p.defs {
		args = append(args, "-D", d)
	}
	args = append(args, p.dbURL)
	cmd := exec.CommandContext(ctx, "pgbench", args...)
	cmd.Dir = p.dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return result{}, fmt.Errorf("pgbench %s: %w: %s", p.label, err, pgbenchErrors(out))
	}
	var r result
	if ps := cmd.ProcessState; ps != nil {
		r.clientCPU = ps.UserTime() + ps.SystemTime()
	}
	m := tpsRe.FindSubmatch(out)
	if m == nil {
		return result{}, fmt.Errorf("pgbench %s: no tps in its output:\n%s", p.label, out)
	}
	tps, _ := strconv.ParseFloat(string(m[1]), 64)
	r.throughput = tps * float64(p.items)
	if m := failedRe.FindSubmatch(out); m != nil {
		r.errors, _ = strconv.Atoi(string(m[1]))
	}
	files, err := filepath.Glob(prefix + ".*")
	if err != nil || len(files) == 0 {
		return result{}, fmt.Errorf("pgbench %s: no transaction log (%w)", p.label, err)
	}
	for _, f := range files {
		if err := readPgbenchLog(f, &r); err != nil {
			return result{}, err
		}
	}
	sort.Slice(r.lat, func(i, j int) bool { return r.lat[i] < r.lat[j] })
	r.requests = len(r.lat)
	return r, nil
}

// pgbenchErrors returns pgbench's error lines, or its whole output.
func pgbenchErrors(out []byte) string {
	var errs []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "error:") && !contains(errs, l) {
			errs = append(errs, strings.TrimSpace(l))
		}
	}
	if len(errs) == 0 {
		return strings.TrimSpace(string(out))
	}
	return strings.Join(errs, "; ")
}

// readPgbenchLog reads a pgbench -l file: "client_id transaction_no time
// script_no time_epoch time_us …", time being the transaction's latency
// in microseconds ("failed" or "skipped" otherwise).
func readPgbenchLog(path string, r *result) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 {
			continue
		}
		us, err := strconv.ParseInt(fields[2], 10, 64)
		if err != nil {
			continue
		}
		r.lat = append(r.lat, time.Duration(us)*time.Microsecond)
	}
	return sc.Err()
}
