package main

// The one-shot commands: migrate, purge, keys and healthcheck (the command
// line is in cli.go, serve in main.go).

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idempotent-claim/idempotent-claim/sidecar/auth"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/config"
	"github.com/idempotent-claim/idempotent-claim/sidecar/migrate"
)

func migrateCommand(ctx context.Context, cfg config.Config, stderr io.Writer) error {
	pool, err := openPool(ctx, cfg, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	n, err := migrate.Up(ctx, pool)
	if err != nil {
		return err
	}
	l := newLogger(cfg, stderr)
	l.Info().Int("applied", n).Msg("migrations up to date")
	return nil
}

func purgeCommand(ctx context.Context, cfg config.Config, stderr io.Writer) error {
	pool, err := openPool(ctx, cfg, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	l, err := claim.New(pool, claim.Config{Policies: cfg.Policies})
	if err != nil {
		return err
	}
	res, err := l.Purge(ctx, cfg.PurgeBatch)
	log := newLogger(cfg, stderr)
	logPurge(log.Info(), res).Msg("retention purge")
	return err
}

// keysPool opens the pool of the keys commands, migrating first with
// CLAIMD_MIGRATE.
func keysPool(ctx context.Context, cfg config.Config) (*pgxpool.Pool, error) {
	pool, err := openPool(ctx, cfg, nil)
	if err != nil {
		return nil, err
	}
	if cfg.Migrate {
		if _, err := migrate.Up(ctx, pool); err != nil {
			pool.Close()
			return nil, err
		}
	}
	return pool, nil
}

func keysCreate(ctx context.Context, cfg config.Config, tenant, name string, stdout io.Writer) error {
	pool, err := keysPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	key, info, err := auth.Create(ctx, pool, tenant, name)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "id:     %s\ntenant: %s\nkey:    %s\n(shown once; only its SHA-256 is stored)\n", info.ID, info.Tenant, key)
	return nil
}

func keysRevoke(ctx context.Context, cfg config.Config, idOrPrefix string, stdout io.Writer) error {
	pool, err := keysPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	info, err := auth.Revoke(ctx, pool, idOrPrefix)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "revoked %s (%s, tenant %s); cached lookups expire within %s\n", info.ID, info.Prefix, info.Tenant, cfg.KeyCacheTTL)
	return nil
}

func keysList(ctx context.Context, cfg config.Config, stdout io.Writer) error {
	pool, err := keysPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	infos, err := auth.List(ctx, pool)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tTENANT\tNAME\tPREFIX\tCREATED\tREVOKED")
	for _, i := range infos {
		revoked := "-"
		if i.RevokedAt != nil {
			revoked = i.RevokedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", i.ID, i.Tenant, i.Name, i.Prefix, i.CreatedAt.UTC().Format(time.RFC3339), revoked)
	}
	return w.Flush()
}

// healthcheck is for container health checks in images without curl.
func healthcheck(ctx context.Context, url string, getenv func(string) string) error {
	if url == "" {
		addr := getenv("CLAIMD_ADDR")
		if addr == "" {
			addr = "127.0.0.1:8080"
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("CLAIMD_ADDR: %w", err)
		}
		if host == "" || host == "0.0.0.0" || host == "::" {
			host = "127.0.0.1"
		}
		url = "http://" + net.JoinHostPort(host, port) + "/readyz"
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %d", url, resp.StatusCode)
	}
	return nil
}
