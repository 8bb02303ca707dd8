fn main() {
    println!("kubeflavor: under construction");
}
