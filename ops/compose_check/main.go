// compose-check reads a compose file the way `docker compose` does (compose-go: the Compose
// Specification's JSON schema, interpolation, then the loader's own checks) and prints the project it
// loaded as JSON, or the loader's error and exit status 1. trialog's tests run it on
// ops/deploy/compose.yaml (tests/integration/test_deploy_compose.py).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/compose-spec/compose-go/v2/cli"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: compose-check COMPOSE_FILE")
		os.Exit(2)
	}
	path, err := filepath.Abs(os.Args[1])
	if err != nil {
		fail(err)
	}
	options, err := cli.NewProjectOptions(
		[]string{path},
		cli.WithName("trialog"),
		cli.WithWorkingDirectory(filepath.Dir(path)),
		cli.WithOsEnv,
	)
	if err != nil {
		fail(err)
	}
	project, err := options.LoadProject(context.Background())
	if err != nil {
		fail(err)
	}
	out, err := json.Marshal(project)
	if err != nil {
		fail(err)
	}
	fmt.Println(string(out))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "compose-check:", err)
	os.Exit(1)
}
