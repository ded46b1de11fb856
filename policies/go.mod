module github.com/sluice-gitops/sluice/policies

go 1.26.8
