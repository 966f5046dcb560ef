package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v3"

	"github.com/idempotent-claim/idempotent-claim/sidecar/config"
)

// The command line, parsed by urfave/cli:
//
//	claimd [serve] [settings flags]     run the HTTP API (the default command)
//	claimd migrate [settings flags]     apply pending migrations and exit
//	claimd purge [settings flags]       run the retention purge once and exit
//	claimd keys create TENANT [NAME]    create a database API key (printed once)
//	claimd keys revoke ID_OR_PREFIX     revoke one
//	claimd keys list                    list them (never the keys)
//	claimd healthcheck [URL]            exit 0 when URL (default: CLAIMD_ADDR's /readyz) answers 200
//	claimd settings [-markdown]         print every setting: flag, variable, default, meaning
//	claimd help [COMMAND]               usage, also COMMAND --help or -h
//
// Every command that reads the database takes the settings of config.Vars
// as flags (-name value, -name=value or --name value; a flag wins over its
// environment variable). `COMMAND --help` prints that command's usage and
// exits 0; a usage error (unknown command, flag or argument) prints one
// line naming it and exits 1, like every other failure.

// run parses args (without the program name) and runs the command they
// name. getenv is os.Getenv in production; stdout takes what a command
// prints for the user (usage, keys, tables), stderr the log.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return newCLI(getenv, stdout, stderr).Run(ctx, append([]string{"claimd"}, args...))
}

// visible lists, per command other than serve, the settings its --help
// shows; it accepts all of them.
var visible = map[string][]string{
	"migrate": {"DATABASE_URL", "CLAIMD_LOG_LEVEL", "CLAIMD_LOG_FORMAT"},
	"purge": {"DATABASE_URL", "CLAIMD_SOURCES_FILE", "CLAIMD_RETENTION_DAYS", "CLAIMD_KEY_RETENTION_DAYS",
		"CLAIMD_PURGE_BATCH", "CLAIMD_LOG_LEVEL", "CLAIMD_LOG_FORMAT"},
	"keys": {"DATABASE_URL", "CLAIMD_MIGRATE", "CLAIMD_LOG_LEVEL", "CLAIMD_LOG_FORMAT"},
}

const keysSettings = "Settings (DATABASE_URL, CLAIMD_MIGRATE, …) as for `claimd keys`: flags before or after the command, or environment variables."

const otherSettings = "Every setting of `claimd serve` is accepted too, as a flag or its environment " +
	"variable (`claimd settings` lists them)."

// settingFlags are the flags of config.Vars for command name ("serve":
// all shown).
func settingFlags(name string) []cli.Flag {
	flags := make([]cli.Flag, 0, len(config.Vars))
	for _, v := range config.Vars {
		flags = append(flags, &cli.StringFlag{
			Name:        v.Flag,
			Usage:       v.Help + " [$" + v.Env + "]",
			Value:       v.Default,
			HideDefault: v.Default == "",
			Hidden:      name != "serve" && !slices.Contains(visible[name], v.Env),
		})
	}
	return flags
}

// loadConfig reads the settings of the command being run: the flags given
// on its command line, then the environment.
func loadConfig(c *cli.Command, getenv func(string) string) (config.Config, error) {
	flags := map[string]string{}
	for _, v := range config.Vars {
		if c.IsSet(v.Flag) {
			flags[v.Env] = c.String(v.Flag)
		}
	}
	return config.Load(flags, getenv)
}

// noArgs refuses positional arguments of a command that takes none.
func noArgs(c *cli.Command) error {
	if c.Args().Len() == 0 {
		return nil
	}
	if c.Name == "serve" {
		// Also `claimd frobnicate`: serve is the default command.
		return fmt.Errorf("unknown command or argument %q (see `claimd help`)", clip(c.Args().First()))
	}
	return fmt.Errorf("%s takes no arguments, got %q (see `%s --help`)", c.FullName(), clip(c.Args().First()), c.FullName())
}

// argsBetween checks the number of positional arguments of a keys
// subcommand before anything else (the settings, the database).
func argsBetween(c *cli.Command, lo, hi int) error {
	if n := c.Args().Len(); n < lo || n > hi {
		return fmt.Errorf("usage: %s %s (see `%s --help`)", c.FullName(), c.ArgsUsage, c.FullName())
	}
	return nil
}

// needDatabaseURL refuses a one-shot command (migrate, purge, keys …)
// without DATABASE_URL, naming where the URL of `make run`'s database
// comes from: these commands act on the database of a running claimd,
// while `make run` (which config.Validate suggests for serve) starts a
// claimd, and gives no URL to a command run beside it.
func needDatabaseURL(c *cli.Command, getenv func(string) string) error {
	if c.Name == "serve" || c.IsSet("database-url") || getenv("DATABASE_URL") != "" {
		return nil
	}
	return fmt.Errorf("DATABASE_URL is required: the database of the claimd to act on (for the one `make run` serves: "+
		"DATABASE_URL=$(make db-url) %s)", strings.Join(append([]string{c.FullName()}, c.Args().Slice()...), " "))
}

// clip shortens an argument echoed in an error.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// usageError is the OnUsageError of every command: one line naming the
// fault and where the usage is, instead of urfave/cli's full help.
func usageError(_ context.Context, c *cli.Command, err error, _ bool) error {
	return fmt.Errorf("%w (see `%s --help`)", err, c.FullName())
}

func newCLI(getenv func(string) string, stdout, stderr io.Writer) *cli.Command {
	// withConfig runs action with the settings, once the positional
	// arguments are known to be right: none, or for the keys subcommands
	// between lo and hi of them.
	withConfig := func(lo, hi int, action func(context.Context, *cli.Command, config.Config) error) cli.ActionFunc {
		return func(ctx context.Context, c *cli.Command) error {
			check := noArgs
			if hi > 0 {
				check = func(c *cli.Command) error { return argsBetween(c, lo, hi) }
			}
			if err := check(c); err != nil {
				return err
			}
			if err := needDatabaseURL(c, getenv); err != nil {
				return err
			}
			cfg, err := loadConfig(c, getenv)
			if err != nil {
				return err
			}
			return action(ctx, c, cfg)
		}
	}
	// withSettings is a command that takes the settings flags and no
	// arguments: serve, migrate, purge.
	withSettings := func(name, usage, description string, action func(context.Context, config.Config, io.Writer) error) *cli.Command {
		return &cli.Command{
			Name: name, Usage: usage, Description: description,
			Flags: settingFlags(name),
			Action: withConfig(0, 0, func(ctx context.Context, _ *cli.Command, cfg config.Config) error {
				return action(ctx, cfg, stderr)
			}),
		}
	}
	root := &cli.Command{
		Name:  "claimd",
		Usage: "the Idempotent Claim sidecar: exactly-once side effects for n8n workflows",
		Description: "With no command, claimd serves (`claimd serve`). Settings come from environment variables " +
			"and flags (a flag wins); `claimd settings` lists them all with their defaults.",
		Version:        version(),
		DefaultCommand: "serve",
		Writer:         stdout,
		ErrWriter:      stderr,
		// Errors are returned to main, which prints them and exits 1;
		// urfave/cli's default handler would exit the process itself.
		ExitErrHandler: func(context.Context, *cli.Command, error) {},
		Commands: []*cli.Command{
			withSettings("serve", "run the HTTP API, the dispatcher and the maintenance loop until SIGTERM/SIGINT",
				"Listens on CLAIMD_ADDR. SIGHUP reloads CLAIMD_SOURCES_FILE; SIGTERM or SIGINT drains in-flight requests "+
					"(CLAIMD_SHUTDOWN_TIMEOUT_SECONDS) and stops.", serveCommand),
			withSettings("migrate", "apply pending schema migrations and exit",
				"`claimd serve` applies them itself on start unless CLAIMD_MIGRATE=false. "+otherSettings, migrateCommand),
			withSettings("purge", "run the retention purge once and exit",
				"Deletes payloads past CLAIMD_RETENTION_DAYS and records past their key retention, as the maintenance loop of "+
					"`claimd serve` does every CLAIMD_MAINTENANCE_INTERVAL_SECONDS; logs what it deleted. "+otherSettings, purgeCommand),
			{
				Name:  "keys",
				Usage: "create, revoke and list database API keys",
				Description: "Keys created here are stored as their SHA-256 only; the key itself is printed once. " +
					"With CLAIMD_MIGRATE (the default) the schema is migrated first. " + otherSettings,
				Flags: settingFlags("keys"),
				Action: func(_ context.Context, c *cli.Command) error {
					if c.Args().Len() == 0 {
						return errors.New("keys: a command is required: create TENANT [NAME], revoke ID_OR_PREFIX or list (see `claimd keys --help`)")
					}
					return fmt.Errorf("keys: unknown command %q; want create, revoke or list (see `claimd keys --help`)", clip(c.Args().First()))
				},
				Commands: []*cli.Command{
					{
						Name:        "create",
						Usage:       "create a key for TENANT (NAME: a label for `keys list`) and print it once",
						ArgsUsage:   "TENANT [NAME]",
						Description: keysSettings,
						Action: withConfig(1, 2, func(ctx context.Context, c *cli.Command, cfg config.Config) error {
							return keysCreate(ctx, cfg, c.Args().First(), c.Args().Get(1), stdout)
						}),
					},
					{
						Name:        "revoke",
						Usage:       "revoke the key with this id or prefix (as `keys list` shows them)",
						ArgsUsage:   "ID_OR_PREFIX",
						Description: "Takes effect on other replicas once their key cache expires (CLAIMD_KEY_CACHE_SECONDS). " + keysSettings,
						Action: withConfig(1, 1, func(ctx context.Context, c *cli.Command, cfg config.Config) error {
							return keysRevoke(ctx, cfg, c.Args().First(), stdout)
						}),
					},
					{
						Name:        "list",
						Usage:       "list the keys: id, tenant, name, prefix, created, revoked (never the key)",
						Description: keysSettings,
						Action: withConfig(0, 0, func(ctx context.Context, c *cli.Command, cfg config.Config) error {
							return keysList(ctx, cfg, stdout)
						}),
					},
				},
			},
			{
				Name:  "healthcheck",
				Usage: "exit 0 when URL answers 200 within 5 s, else print why and exit 1",
				Description: "For container health checks in images without curl. URL defaults to /readyz on " +
					"CLAIMD_ADDR (an unspecified host such as 0.0.0.0 becomes 127.0.0.1).",
				ArgsUsage: "[URL]",
				Action: func(ctx context.Context, c *cli.Command) error {
					if err := argsBetween(c, 0, 1); err != nil {
						return err
					}
					return healthcheck(ctx, c.Args().First(), getenv)
				},
			},
			{
				Name:  "settings",
				Usage: "print every setting: flag, environment variable, default, meaning",
				Flags: []cli.Flag{&cli.BoolFlag{Name: "markdown", Usage: "print the configuration table of sidecar/docs/manual.md#configuration instead"}},
				Action: func(_ context.Context, c *cli.Command) error {
					if err := noArgs(c); err != nil {
						return err
					}
					if c.Bool("markdown") {
						_, err := fmt.Fprint(stdout, config.MarkdownTable())
						return err
					}
					return printSettings(stdout)
				},
			},
		},
	}
	setUsageError(root)
	return root
}

// setUsageError gives cmd and every command below it usageError
// (urfave/cli does not pass it down).
func setUsageError(cmd *cli.Command) {
	cmd.OnUsageError = usageError
	for _, c := range cmd.Commands {
		setUsageError(c)
	}
}

// printSettings prints config.Vars as a table.
func printSettings(w io.Writer) error {
	fmt.Fprintln(w, "Settings: flag, environment variable, default, meaning. A flag wins over its variable.")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, v := range config.Vars {
		fmt.Fprintf(tw, "  -%s\t%s\t%s\t%s\n", v.Flag, v.Env, v.Default, v.Help)
	}
	return tw.Flush()
}

// version is the module version and VCS revision the binary was built
// from, as the Go toolchain recorded them.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "+modified"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" {
		v = strings.TrimSpace(v + " " + rev + modified)
	}
	return v
}
