// Package kumiko will be the facade an application's main uses: Config,
// BuildServer (wired with fx, every part also constructible by hand), App with
// Start/Stop, Main for the app binary's CLI, and instance-id resolution.
package kumiko
