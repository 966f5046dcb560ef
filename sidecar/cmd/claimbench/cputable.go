package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
)

// newCPUMeter prepares the CPU measurement of the claims cells.
func (b *bench) newCPUMeter(ctx context.Context) *cpuMeter {
	return newCPUMeter(ctx, b.sidecar, b.dbURL)
}

// newCPUMeter prepares a CPU measurement of sc's claimd (nil: none) and of
// the server of dbURL (a libpq URL of the benchmark database), whose
// process tree is found through that database's own backend. It never
// fails: what cannot be measured is reported as n/a. Per cell:
// mark := m.start(); …; c := mark.end().
func newCPUMeter(ctx context.Context, sc *sidecar, dbURL string) *cpuMeter {
	m := &cpuMeter{}
	m.hz, m.hzSource = clockTicks()
	if sc != nil && sc.cmd.Process != nil {
		m.claimd = sc.cmd.Process.Pid
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		m.pgNA = "cannot connect to find the server's processes: " + err.Error()
		return m
	}
	defer conn.Close(ctx)
	self, err := queries.BackendIdentity(ctx, conn)
	if err != nil {
		m.pgNA = "pg_backend_pid(): " + err.Error()
		return m
	}
	if m.pg, err = findPgServer(int(self.Pid), self.Database); err != nil {
		m.pgNA = err.Error()
	}
	return m
}

// cpuRow is one claims cell's CPU times, sidecar side and pgbench side.
type cpuRow struct {
	workload                     string
	conc                         int
	sidecar, pgbench             cellCPU
	sidecarClaims, pgbenchClaims int
	// pgbenchClient is nil when pgbench failed.
	pgbenchClient *time.Duration
}

// foreignShare above which a PG figure is marked: other databases'
// backends used that much of the server's CPU during the cell.
const foreignShare = 0.05

// usPerClaim formats d per claim in µs, or "n/a".
func usPerClaim(d *time.Duration, claims int) string {
	if d == nil || claims <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f", float64(*d)/float64(time.Microsecond)/float64(claims))
}

// pgPerClaim formats the server's CPU per claim; a trailing * marks a
// cell where other databases' backends were busy.
func (m *cpuMeter) pgPerClaim(c cellCPU, claims int) (string, float64, bool) {
	if c.pg == nil || claims <= 0 {
		return "n/a", 0, false
	}
	d := m.ticks(c.pg.ours())
	us := float64(d) / float64(time.Microsecond) / float64(claims)
	busy := c.pg.total > 0 && float64(c.pg.foreign) >= foreignShare*float64(c.pg.total)
	s := fmt.Sprintf("%.1f", us)
	if busy {
		s += "*"
	}
	return s, us, busy
}

func (m *cpuMeter) print(w io.Writer, rows []cpuRow) {
	fmt.Fprintf(w, "\nCPU time per claim (µs, user+sys; /proc, %d ticks/s from %s)\n", m.hz, m.hzSource)
	fmt.Fprintf(w, "%-11s %5s | %8s %8s %8s | %8s %8s | %8s\n", "", "", "sidecar", "", "", "pgbench", "", "")
	fmt.Fprintf(w, "%-11s %5s | %8s %8s %8s | %8s %8s | %8s\n", "workload", "conc", "claimd", "PG", "client", "PG", "client", "PG ratio")
	var marked bool
	var foreign, total uint64
	var errs []string
	for _, r := range rows {
		self := r.sidecar.self
		spg, sus, sb := m.pgPerClaim(r.sidecar, r.sidecarClaims)
		ppg, pus, pb := m.pgPerClaim(r.pgbench, r.pgbenchClaims)
		ratio := "-"
		if sus > 0 && pus > 0 {
			ratio = fmt.Sprintf("%.2f", sus/pus)
		}
		marked = marked || sb || pb
		for _, c := range []cellCPU{r.sidecar, r.pgbench} {
			if c.pg != nil {
				foreign += c.pg.foreign
				total += c.pg.total
			}
			if c.err != nil && len(errs) == 0 {
				errs = append(errs, fmt.Sprintf("%s c=%d: PG CPU not measured: %v", r.workload, r.conc, c.err))
			}
		}
		fmt.Fprintf(w, "%-11s %5d | %8s %8s %8s | %8s %8s | %8s\n", r.workload, r.conc,
			usPerClaim(r.sidecar.claimd, r.sidecarClaims), spg, usPerClaim(&self, r.sidecarClaims),
			ppg, usPerClaim(r.pgbenchClient, r.pgbenchClaims), ratio)
	}
	fmt.Fprintf(w, "\nclaimd: its process (all threads); PG: the whole server (postmaster, backends, walwriter,\n"+
		"checkpointer, … including backends that exit during the cell), less the backends of other databases;\n"+
		"client: the benchmark's HTTP clients (this process) / the pgbench process. Per claim decided\n"+
		"(batch: per item). The sidecar's pool is warm; the pgbench side includes opening its connections and\n"+
		"preparing the script's statements on each (custom plans for the first 5 executions: most of a short batch cell).\n"+
		"PG ratio = PG µs/claim under the sidecar / under pgbench.\n")
	if m.pgNA != "" {
		fmt.Fprintf(w, "PG: n/a: %s.\n", m.pgNA)
	}
	if marked {
		fmt.Fprintf(w, "* other databases' backends used ≥%.0f%% of the server's CPU in that cell (%.1f s of %.1f s over\n"+
			"  all cells, subtracted); what they caused in shared processes (WAL writing, …) is not: figure overstated.\n",
			foreignShare*100, m.ticks(foreign).Seconds(), m.ticks(total).Seconds())
	}
	for _, e := range errs {
		fmt.Fprintln(w, e)
	}
}
