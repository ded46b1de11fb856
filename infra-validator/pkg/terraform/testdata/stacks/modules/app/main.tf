variable "env" {
  type = string
}

resource "terraform_data" "app" {
  count = 2
  input = "app-${var.env}-${count.index}"
}
