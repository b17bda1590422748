// Command pelwarden is a ghost-aware KEDA external scaler and PEL hygiene
// service for Redis Streams consumer groups.
package main

import (
	"os"

	"github.com/pelwarden/pelwarden/internal/app"
)

func main() { os.Exit(run()) }

func run() int {
	return execute(os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr, app.Run)
}
