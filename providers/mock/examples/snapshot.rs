//! Renders a scene to a PNG file, optionally after some actions: a preview tool for scene authors.
//!
//! `cargo run -p agentd-mock --example snapshot -- SCENE OUT.png [WIDTHxHEIGHT] [ACTIONS.json]`
//! where SCENE is a built-in name or a scene file and ACTIONS.json a JSON array of actions (docs/task-file.md form).

use agentd_computer::{Action, Size};
use agentd_mock::{MockDesktop, Scene};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(scene), Some(out)) = (args.first(), args.get(1)) else {
        return Err("usage: snapshot SCENE OUT.png [WIDTHxHEIGHT] [ACTIONS.json]".into());
    };
    let size = match args.get(2) {
        Some(text) => {
            let (w, h) = text.split_once('x').ok_or("size is WIDTHxHEIGHT")?;
            Some(Size::new(w.parse()?, h.parse()?))
        }
        None => None,
    };
    let desktop = MockDesktop::new(Scene::resolve(scene, None)?, size)?;
    if let Some(path) = args.get(3) {
        let actions: Vec<Action> = serde_json::from_str(&std::fs::read_to_string(path)?)?;
        for action in &actions {
            if let Err(e) = desktop.apply(action) {
                eprintln!("{}: {e}", action.summary());
            }
        }
    }
    let frame = desktop.frame();
    let file = std::io::BufWriter::new(std::fs::File::create(out)?);
    let mut encoder = png::Encoder::new(file, frame.width(), frame.height());
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.write_header()?.write_image_data(frame.as_rgb())?;
    eprintln!("{}", serde_json::to_string_pretty(&desktop.mock_state())?);
    Ok(())
}
