package config

// SettingRef names what sets one config path besides the file: its
// environment variable and, where it has one, its flag.
type SettingRef struct {
	// Path is the config path; redis[default] is the connection named
	// default, created when the file has none.
	Path string
	// Env is the PELWARDEN_* variable.
	Env string
	// Flag is the flag name without dashes; empty when there is none.
	Flag string
}

// SettingRefs lists the environment variables and flags that Load applies,
// in help order, PELWARDEN_CONFIG (--config) first: the reference pages
// are generated from the list Load reads.
func SettingRefs() []SettingRef {
	refs := []SettingRef{{Path: "", Env: EnvConfig, Flag: "config"}}
	for _, s := range settings {
		refs = append(refs, SettingRef{Path: s.path, Env: s.env, Flag: s.flag})
	}
	return refs
}
