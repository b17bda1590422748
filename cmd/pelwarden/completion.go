package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// shells are the shells completion writes a script for.
var shells = []string{"bash", "zsh", "fish"}

func newCompletionCommand(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "completion bash|zsh|fish",
		Short: "Print the shell completion script for bash, zsh or fish",
		Long: `Print the script that completes pelwarden's commands and flags in a shell.

  bash:  source <(pelwarden completion bash)
         (for every shell: pelwarden completion bash > /etc/bash_completion.d/pelwarden)
  zsh:   pelwarden completion zsh > "${fpath[1]}/_pelwarden"
  fish:  pelwarden completion fish > ~/.config/fish/completions/pelwarden.fish`,
		Args:      cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs),
		ValidArgs: shells,
		RunE: func(cmd *cobra.Command, args []string) error {
			root := cmd.Root()
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(stdout, true)
			case "zsh":
				return root.GenZshCompletion(stdout)
			case "fish":
				return root.GenFishCompletion(stdout, true)
			}
			return fmt.Errorf("no completion for shell %q", args[0])
		},
	}
}
