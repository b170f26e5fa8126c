// Package version names the gpuroute release a build belongs to: one
// constant that the plugin reports at start and the controller prints, so
// the proxies of a fleet and its controller can be matched to an entry of
// CHANGELOG.md.
//
//	println("gpuroute " + version.Release + " starting")
//
// It is a constant and nothing else, so the Wasm module may import it.
package version

// Release is the release this source tree builds, in Semantic Versioning
// 2.0.0. A "-dev" suffix marks work toward that release, whose changes
// CHANGELOG.md lists under "Unreleased"; cutting the release drops the
// suffix and dates the section (TestChangelogNamesRelease).
const Release = "0.2.0-dev"
