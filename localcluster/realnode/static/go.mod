module projectsignal.dev/localcluster/realnode/static

go 1.26.0
