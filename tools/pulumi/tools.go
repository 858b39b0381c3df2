//go:build tools

// The CLI's main package, kept in the module graph so that go.sum pins every module it builds from.
package tools

import _ "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi"
