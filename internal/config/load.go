package config

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// Sources is where Load reads, so that tests need not touch the process.
type Sources struct {
	// Env looks up an environment variable, like os.LookupEnv. A variable
	// set to the empty string counts as unset, so a Kubernetes manifest can
	// blank one out. Nil means no environment.
	Env func(name string) (string, bool)
	// ReadFile reads the config file and password files, like os.ReadFile.
	// Nil means os.ReadFile.
	ReadFile func(path string) ([]byte, error)
	// NoSecrets leaves passwords unread, and the files the configuration
	// names (TLS certificates and keys, tokens, a kubeconfig) unjudged,
	// for a configuration only looked at, never served (pelwarden
	// check-trigger --config, away from the pod that mounts them).
	NoSecrets bool
}

func (s Sources) lookup(name string) (string, bool) {
	if s.Env == nil {
		return "", false
	}
	v, ok := s.Env(name)
	return v, ok && v != ""
}

func (s Sources) readFile(path string) ([]byte, error) {
	if s.ReadFile == nil {
		return os.ReadFile(path) //nolint:gosec // G304: reading the files the operator configured is the point
	}
	return s.ReadFile(path)
}

// Flags holds the command-line flags that override the configuration.
// NewFlags registers them; after the flag set is parsed, Load applies the
// ones given on the command line and nothing else.
type Flags struct {
	config flagValue
	values []*flagValue
}

// NewFlags registers pelwarden's configuration flags on fs. Each flag's help
// names its environment variable; a value is checked as it is parsed, so a
// malformed one is a usage error.
func NewFlags(fs *pflag.FlagSet) *Flags {
	f := &Flags{config: flagValue{typ: "path"}}
	fs.Var(&f.config, "config", "YAML config file (env "+EnvConfig+")")
	defaults := Default()
	for i := range settings {
		s := &settings[i]
		if s.flag == "" {
			continue
		}
		v := &flagValue{setting: s, typ: s.typ}
		if s.show != nil {
			scratch := defaults
			v.def = s.show(&scratch)
		}
		f.values = append(f.values, v)
		fs.Var(v, s.flag, fmt.Sprintf("%s (env %s)", s.usage, s.env))
		if s.typ == "bool" {
			fs.Lookup(s.flag).NoOptDefVal = "true"
		}
	}
	return f
}

// flagValue is a pflag.Value that remembers whether it was set.
type flagValue struct {
	setting *setting // nil for --config
	typ     string
	def     string
	raw     string
	changed bool
}

func (v *flagValue) String() string {
	if v.changed {
		return v.raw
	}
	return v.def
}

func (v *flagValue) Set(raw string) error {
	if v.setting != nil {
		scratch := Default()
		if err := v.setting.apply(&scratch, raw); err != nil {
			return err
		}
	}
	v.raw, v.changed = raw, true
	return nil
}

func (v *flagValue) Type() string { return v.typ }

// Load builds the configuration: defaults, then the YAML file named by
// --config or PELWARDEN_CONFIG, then PELWARDEN_* variables, then flags; each
// layer overrides the one before. The PELWARDEN_REDIS_* variables and
// --redis-* flags set the connection named default, creating it if the file
// has none. Passwords are then read from passwordEnv or passwordFile, and the
// result is validated. flags may be nil.
//
// Every error is an *Error listing all problems found.
func Load(src Sources, flags *Flags) (Config, error) {
	var p problems
	cfg := Default()

	file, _ := src.lookup(EnvConfig)
	if flags != nil && flags.config.changed {
		file = flags.config.raw
	}
	if file != "" {
		data, err := src.readFile(file)
		if err != nil {
			p.add("config file", "must name a readable file: %s", pathErrText(err))
			return Config{}, p.err()
		}
		decodeYAML(file, data, &cfg, &p)
		if len(p) > 0 {
			return Config{}, p.err()
		}
	}

	applyEnv(src, &cfg, &p)
	if flags != nil {
		for _, v := range flags.values {
			if !v.changed {
				continue
			}
			if err := v.setting.apply(&cfg, v.raw); err != nil {
				p.add("--"+v.setting.flag, "%v", err)
			}
		}
	}
	if !src.NoSecrets {
		resolvePasswords(src, &cfg, &p)
	}
	cfg.validate(&p)
	if src.NoSecrets {
		p = p.withoutFiles()
	}
	if len(p) > 0 {
		return Config{}, p.err()
	}
	return cfg, nil
}

func applyEnv(src Sources, cfg *Config, p *problems) {
	for _, s := range settings {
		raw, ok := src.lookup(s.env)
		if !ok {
			continue
		}
		if err := s.apply(cfg, raw); err != nil {
			p.add(s.env, "%v", err)
		}
	}
	for _, pair := range [][2]string{{envPassword, envPasswordFile}, {envSentinelPassword, envSentinelPasswordFile}} {
		_, hasPassword := src.lookup(pair[0])
		_, hasFile := src.lookup(pair[1])
		if hasPassword && hasFile {
			p.add(pair[0], "is mutually exclusive with %s; set one of them", pair[1])
		}
	}
}

// resolvePasswords fills Password from PasswordEnv or PasswordFile, for
// each connection and its sentinels. Naming both is reported by Validate.
func resolvePasswords(src Sources, cfg *Config, p *problems) {
	for i := range cfg.Redis {
		r := &cfg.Redis[i]
		path := fmt.Sprintf("redis[%d]", i)
		r.Password = resolveSecret(src, p, path+".password", r.PasswordEnv, r.PasswordFile)
		s := &r.Sentinel
		s.Password = resolveSecret(src, p, path+".sentinel.password", s.PasswordEnv, s.PasswordFile)
	}
}

// resolveSecret reads a password from the variable env or the file, and
// reports problems under field+"Env" and field+"File".
func resolveSecret(src Sources, p *problems, field, env, file string) string {
	switch {
	case env != "" && file != "":
	case env != "":
		v, ok := src.lookup(env)
		if !ok {
			p.add(field+"Env", "names the environment variable %s, which is unset or empty", env)
		}
		return v
	case file != "":
		data, err := src.readFile(file)
		if err != nil {
			p.add(field+"File", "must name a readable file: %s", pathErrText(err))
			return ""
		}
		v := strings.TrimRight(string(data), "\r\n")
		if v == "" {
			p.add(field+"File", "names %q, which holds no password", file)
		}
		return v
	}
	return ""
}
