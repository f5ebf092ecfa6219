// Package ops is the command line of kumiko binaries: serve and worker of an
// app binary, and the operations commands (migrate, consumer, inspect,
// events, token, subject, and with the app's features project and snapshot)
// that app binaries share with cmd/kumiko. App binaries reach it through
// kumiko.Main, which hands it an App: the app's settings, features and a way
// to build the server; cmd/kumiko uses Generic. It does not import the
// kumiko facade.
//
// The commands read and change the database only through the packages that
// own its tables (eventstore, pipeline); they hold no SQL of their own.
package ops
