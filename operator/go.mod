module github.com/sluice-gitops/sluice/operator

go 1.26.8

replace github.com/sluice-gitops/sluice/operator/api => ./api
