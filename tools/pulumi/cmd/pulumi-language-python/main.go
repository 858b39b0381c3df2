// Command pulumi-language-python is the Python language host the Pulumi CLI starts to run gpuhosts' program.
//
// Why it exists: Pulumi's own host (module github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3) is
// published only by pseudo-version and the Go module proxy we build from serves it at no version (every release
// commit tried answers 403), while the CLI and the sdk/v3 module are served. So this host is as thin as it can be:
// it does what Pulumi's host does for running a program and nothing else, built on sdk/v3's own packages (rpcutil,
// the plugin protocol, the Python toolchain), and it runs sdk/v3's own exec shim, pulumi-language-python-exec,
// exactly as Pulumi's host does. Code generation, packing, linking, debugging, typecheckers, `pulumi new` and
// Python plugins are left out: the CLI answers an unimplemented call as "not supported", and gpuhosts needs none.
//
// Each behaviour cites Pulumi's host, sdk/python/cmd/pulumi-language-python/main.go at tag v3.259.0, by line.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/util/cmdutil"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/rpcutil"
	"github.com/pulumi/pulumi/sdk/v3/go/common/version"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"github.com/pulumi/pulumi/sdk/v3/python/toolchain"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
)

const (
	// main.go:85, 160-170: the executor sits beside the host's own binary.
	execShimName = "pulumi-language-python-exec"
	// main.go:88-93: the program's config and the names of its secret keys travel as environment variables.
	configEnv           = "PULUMI_CONFIG"
	configSecretKeysEnv = "PULUMI_CONFIG_SECRET_KEYS"
	// main.go:95-97, 1184-1185: the shim exits 32 after it has shown the user an actionable message.
	exitAfterUserMessage = 32
)

func main() {
	// main.go:115-128: the flags the CLI may pass; the positional argument is the engine's address.
	tracingEndpoint := flag.String("tracing", "", "Emit tracing to a Zipkin-compatible tracing endpoint")
	showVersion := flag.Bool("version", false, "Print the current plugin version and exit")
	givenExecutor := flag.String("use-executor", "", "Use the given program as the executor")
	flag.Parse()
	if *showVersion {
		fmt.Println(version.Version)
		return
	}

	executor := *givenExecutor
	if executor == "" {
		self, err := os.Executable()
		if err != nil {
			cmdutil.Exit(fmt.Errorf("could not determine current executable: %w", err))
		}
		executor = filepath.Join(filepath.Dir(self), execShimName)
		if _, err := os.Stat(executor); err != nil {
			cmdutil.Exit(fmt.Errorf("missing executor %s: %w", executor, err))
		}
	}

	var engineAddress string
	if flag.NArg() > 0 {
		engineAddress = flag.Arg(0)
	}

	// main.go:176-189: an interrupt, or the engine going away, stops the server.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	stopServing := make(chan bool)
	go func() {
		<-ctx.Done()
		stop()
		close(stopServing)
	}()
	if engineAddress != "" {
		if err := rpcutil.Healthcheck(ctx, engineAddress, 5*time.Minute, stop); err != nil {
			cmdutil.Exit(fmt.Errorf("could not start health check host RPC server: %w", err))
		}
	}

	cancelCtx, cancel := context.WithCancel(context.Background())
	host := &languageHost{
		executor: executor, engineAddress: engineAddress, tracing: *tracingEndpoint,
		cancelCtx: cancelCtx, cancel: cancel,
	}
	// main.go:192-207: serve on a port the kernel picks and print it for the CLI.
	handle, err := rpcutil.ServeWithOptions(rpcutil.ServeOptions{
		Cancel: stopServing,
		Init: func(server *grpc.Server) error {
			pulumirpc.RegisterLanguageRuntimeServer(server, host)
			return nil
		},
		Options: rpcutil.TracingServerInterceptorOptions(nil),
	})
	if err != nil {
		cmdutil.Exit(fmt.Errorf("could not start language host RPC server: %w", err))
	}
	fmt.Printf("%d\n", handle.Port)
	if err := <-handle.Done; err != nil {
		cmdutil.Exit(fmt.Errorf("language host RPC stopped serving: %w", err))
	}
}

type languageHost struct {
	pulumirpc.UnimplementedLanguageRuntimeServer

	executor      string
	engineAddress string
	tracing       string
	// main.go:2033-2036: the Cancel call ends a running program.
	cancelCtx context.Context
	cancel    context.CancelFunc
}

// pythonOptions reads Pulumi.yaml's runtime options (main.go:233-291) that a program run uses: virtualenv and
// toolchain. A typechecker is refused rather than silently skipped.
func pythonOptions(info *pulumirpc.ProgramInfo) (toolchain.PythonOptions, error) {
	opts := toolchain.PythonOptions{Root: info.GetRootDirectory(), ProgramDir: info.GetProgramDirectory()}
	raw := info.GetOptions().AsMap()
	if value, ok := raw["virtualenv"]; ok {
		text, isText := value.(string)
		if !isText {
			return opts, errors.New("virtualenv option must be a string")
		}
		opts.Virtualenv = text
	}
	if _, ok := raw["typechecker"]; ok {
		return opts, errors.New("the typechecker option is not supported by this language host")
	}
	if value, ok := raw["toolchain"]; ok {
		switch value {
		case "pip":
			opts.Toolchain = toolchain.Pip
		case "poetry":
			opts.Toolchain = toolchain.Poetry
		case "uv":
			opts.Toolchain = toolchain.Uv
		default:
			return opts, fmt.Errorf("unsupported toolchain option: %v", value)
		}
	}
	return opts, nil
}

// GetRequiredPackages makes sure the virtual environment exists, as main.go:326-349 does. It reports no package:
// Pulumi's host lists the installed packages that ship a pulumi-plugin.json (a provider SDK) so the CLI can
// install their plugins, and gpuhosts' locked environment holds none (its resources are dynamic, served by the
// bundled pulumi-resource-pulumi-python); tests/test_language_host.py holds the environment to that.
func (h *languageHost) GetRequiredPackages(
	ctx context.Context, req *pulumirpc.GetRequiredPackagesRequest,
) (*pulumirpc.GetRequiredPackagesResponse, error) {
	opts, err := pythonOptions(req.GetInfo())
	if err != nil {
		return nil, err
	}
	tc, err := toolchain.ResolveToolchain(opts)
	if err != nil {
		return nil, err
	}
	if err := tc.EnsureVenv(ctx, opts.ProgramDir, false, false, io.Discard, os.Stderr); err != nil {
		return nil, err
	}
	return &pulumirpc.GetRequiredPackagesResponse{}, nil
}

// GetPluginInfo: main.go:1264-1268.
func (h *languageHost) GetPluginInfo(context.Context, *emptypb.Empty) (*pulumirpc.PluginInfo, error) {
	return &pulumirpc.PluginInfo{Version: version.Version}, nil
}

// Cancel: main.go:2033-2036.
func (h *languageHost) Cancel(context.Context, *emptypb.Empty) (*emptypb.Empty, error) {
	h.cancel()
	return &emptypb.Empty{}, nil
}

// Run starts the exec shim through the toolchain and reports how it ended, as main.go:997-1205 does without a
// debugger or typechecker.
func (h *languageHost) Run(ctx context.Context, req *pulumirpc.RunRequest) (*pulumirpc.RunResponse, error) {
	// main.go:308-311: a program needs the engine's address.
	if h.engineAddress == "" {
		return nil, errors.New("when debugging or running explicitly, must call Handshake before Run")
	}
	opts, err := pythonOptions(req.GetInfo())
	if err != nil {
		return nil, err
	}
	if req.GetAttachDebugger() {
		return &pulumirpc.RunResponse{Error: "this language host does not attach debuggers"}, nil
	}
	config, secretKeys, err := configEnvironment(req)
	if err != nil {
		return nil, err
	}

	// main.go:1043-1062: the toolchain builds the command (for uv: `uv sync --inexact`, then the venv's python);
	// the Cancel call or the end of the request interrupts the program, which has five seconds to exit.
	tc, err := toolchain.ResolveToolchain(opts)
	if err != nil {
		return nil, err
	}
	if err := tc.ValidateVenv(ctx); err != nil {
		return nil, err
	}
	runCtx, stopRun := context.WithCancel(h.cancelCtx)
	defer stopRun()
	context.AfterFunc(ctx, stopRun)
	cmd, err := tc.Command(runCtx, append([]string{h.executor}, h.shimArguments(req)...)...)
	if err != nil {
		return nil, err
	}
	cmd.Cancel = func() error {
		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			return cmd.Process.Kill()
		}
		return nil
	}
	cmd.WaitDelay = 5 * time.Second
	cmd.Stdout = os.Stdout
	cmd.Stderr = os.Stderr
	// main.go:1065-1074: the toolchain's environment (or ours) plus the config.
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	if config != "" {
		env = append(env, configEnv+"="+config)
	}
	cmd.Env = append(env, configSecretKeysEnv+"="+secretKeys)

	// main.go:1171-1204: how the program ended becomes the response's error, or a bail after a shown message.
	if err := cmd.Run(); err != nil {
		_ = os.Stdout.Sync()
		_ = os.Stderr.Sync()
		var exitErr *exec.ExitError
		if !errors.As(err, &exitErr) {
			return &pulumirpc.RunResponse{
				Error: fmt.Sprintf("problem executing program (could not run language executor): %v", err),
			}, nil
		}
		status, ok := exitErr.Sys().(syscall.WaitStatus)
		switch {
		case !ok || status.ExitStatus() == 0:
			return &pulumirpc.RunResponse{Error: fmt.Sprintf("program exited unexpectedly: %v", exitErr)}, nil
		case status.ExitStatus() == exitAfterUserMessage:
			return &pulumirpc.RunResponse{Bail: true}, nil
		default:
			return &pulumirpc.RunResponse{
				Error: fmt.Sprintf("program exited with non-zero exit code: %d", status.ExitStatus()),
			}, nil
		}
	}
	return &pulumirpc.RunResponse{}, nil
}

// shimArguments is the exec shim's command line: main.go:1207-1232, every flag only when it has a value, the entry
// point, then the program's own arguments.
func (h *languageHost) shimArguments(req *pulumirpc.RunRequest) []string {
	var args []string
	for _, flagValue := range [][2]string{
		{"monitor", req.GetMonitorAddress()},
		{"engine", h.engineAddress},
		{"project", req.GetProject()},
		{"root_directory", req.GetInfo().GetRootDirectory()},
		{"stack", req.GetStack()},
		{"pwd", req.GetPwd()},
		{"dry_run", strconv.FormatBool(req.GetDryRun())},
		{"parallel", strconv.Itoa(int(req.GetParallel()))},
		{"tracing", h.tracing},
		{"organization", req.GetOrganization()},
	} {
		if flagValue[1] != "" {
			args = append(args, "--"+flagValue[0], flagValue[1])
		}
	}
	args = append(args, req.GetInfo().GetEntryPoint())
	return append(args, req.GetArgs()...)
}

// configEnvironment serialises the config as JSON (main.go:1234-1248) and the secret keys' names as a JSON list,
// "[]" when there are none (main.go:1250-1262).
func configEnvironment(req *pulumirpc.RunRequest) (string, string, error) {
	config := ""
	if values := req.GetConfig(); values != nil {
		encoded, err := json.Marshal(values)
		if err != nil {
			return "", "", fmt.Errorf("failed to serialize configuration: %w", err)
		}
		config = string(encoded)
	}
	secretKeys := "[]"
	if keys := req.GetConfigSecretKeys(); keys != nil {
		encoded, err := json.Marshal(keys)
		if err != nil {
			return "", "", fmt.Errorf("failed to serialize configuration secret keys: %w", err)
		}
		secretKeys = string(encoded)
	}
	return config, secretKeys, nil
}
